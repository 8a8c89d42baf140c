package io.ckguard.minidfs;

import java.io.IOException;
import java.io.OutputStream;
import java.io.PrintStream;
import java.net.URI;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FsShell;
import org.apache.hadoop.fs.LocatedFileStatus;
import org.apache.hadoop.fs.Path;
import org.apache.hadoop.fs.RemoteIterator;
import org.apache.hadoop.util.ToolRunner;

/**
 * The Java side of the HDFS benchmarks: what Hadoop's own client does, timed inside one warm JVM (the
 * JVM's start is not counted; the connection is set up before the clock starts). Every result is one
 * line on stdout, {@code BENCH op=… n=… ms=…}.
 *
 * <pre>
 *   Bench URI mkfiles ROOT DIRS PER_DIR THREADS   empty files ROOT/dNNNNN/fNNNNNNN (setup, timed too)
 *   Bench URI list PATH                           FileSystem.listFiles(PATH, recursive): files seen
 *   Bench URI shell ARG...                        FsShell (`hdfs dfs ARG...`), its output counted in lines
 *   Bench URI delete LISTFILE                     FileSystem.delete(p, false) for each line, one by one
 *   Bench URI rmr PATH                            FileSystem.delete(PATH, true): one recursive RPC
 * </pre>
 */
public final class Bench {
  public static void main(String[] args) throws Exception {
    PrintStream out = System.out;
    Configuration conf = new Configuration();
    URI uri = URI.create(args[0]);
    conf.set("fs.defaultFS", uri.toString());
    FileSystem fs = FileSystem.get(uri, conf);
    fs.getFileStatus(new Path("/")); // connect before any clock starts
    String op = args[1];
    long t0 = System.nanoTime();
    long n;
    switch (op) {
      case "mkfiles" -> n = mkfiles(fs, new Path(args[2]), Integer.parseInt(args[3]), Integer.parseInt(args[4]), Integer.parseInt(args[5]));
      case "list" -> {
        n = 0;
        RemoteIterator<LocatedFileStatus> it = fs.listFiles(new Path(args[2]), true);
        while (it.hasNext()) {
          it.next();
          n++;
        }
      }
      case "shell" -> {
        CountingStream lines = new CountingStream();
        System.setOut(new PrintStream(lines, false, StandardCharsets.UTF_8));
        String[] shellArgs = java.util.Arrays.copyOfRange(args, 2, args.length);
        t0 = System.nanoTime();
        int rc = ToolRunner.run(new FsShell(conf), shellArgs);
        System.out.flush();
        System.setOut(out);
        if (rc != 0) {
          System.err.println("FsShell " + String.join(" ", shellArgs) + ": exit " + rc);
          System.exit(rc);
        }
        n = lines.lines;
      }
      case "delete" -> {
        List<String> paths = Files.readAllLines(Paths.get(args[2]), StandardCharsets.UTF_8);
        t0 = System.nanoTime();
        n = 0;
        for (String p : paths) {
          if (p.isEmpty()) {
            continue;
          }
          if (!fs.delete(new Path(p), false)) {
            throw new IOException("delete " + p + ": false (missing?)");
          }
          n++;
        }
      }
      case "rmr" -> {
        if (!fs.delete(new Path(args[2]), true)) {
          throw new IOException("delete -r " + args[2] + ": false (missing?)");
        }
        n = 1;
      }
      default -> throw new IllegalArgumentException("unknown op " + op);
    }
    double ms = (System.nanoTime() - t0) / 1e6;
    out.printf("BENCH op=%s n=%d ms=%.1f%n", op, n, ms);
    out.flush();
    System.exit(0);
  }

  private static long mkfiles(FileSystem fs, Path root, int dirs, int perDir, int threads) throws Exception {
    ExecutorService pool = Executors.newFixedThreadPool(threads);
    List<Future<?>> fs2 = new ArrayList<>();
    for (int d = 0; d < dirs; d++) {
      final int dd = d;
      fs2.add(pool.submit(() -> {
        Path dir = new Path(root, String.format("d%05d", dd));
        fs.mkdirs(dir);
        for (int f = 0; f < perDir; f++) {
          fs.create(new Path(dir, String.format("f%07d", dd * perDir + f)), false).close();
        }
        return null;
      }));
    }
    for (Future<?> f : fs2) {
      f.get();
    }
    pool.shutdown();
    return (long) dirs * perDir;
  }

  /** Counts the lines written to it and keeps nothing. */
  private static final class CountingStream extends OutputStream {
    long lines;

    @Override public void write(int b) {
      if (b == '\n') {
        lines++;
      }
    }

    @Override public void write(byte[] b, int off, int len) {
      for (int i = off; i < off + len; i++) {
        if (b[i] == '\n') {
          lines++;
        }
      }
    }
  }
}
