package io.ckguard.flinkjob;

import java.io.File;
import java.io.PrintWriter;
import java.io.StringWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import org.apache.flink.api.common.JobExecutionResult;
import org.apache.flink.api.common.eventtime.WatermarkStrategy;
import org.apache.flink.api.common.typeinfo.Types;
import org.apache.flink.api.connector.source.util.ratelimit.RateLimiterStrategy;
import org.apache.flink.configuration.Configuration;
import org.apache.flink.connector.datagen.source.DataGeneratorSource;
import org.apache.flink.core.execution.JobClient;
import org.apache.flink.core.fs.FileSystem;
import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.streaming.api.datastream.KeyedStream;
import org.apache.flink.streaming.api.datastream.SingleOutputStreamOperator;
import org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink;

/**
 * The e2e job: datagen source → keyBy → {@link StatefulFunction} (RocksDB ValueState with random,
 * incompressible values, plus operator list state) → discarding sink, on a local MiniCluster.
 *
 * <p>Usage: {@code Job --checkpoint-dir URI [--restore PATH --claim-mode CLAIM|NO_CLAIM|LEGACY]
 * [--duration 60s] [--stop-file F] [--stop-after-checkpoints N] [--fail-file F] [--file-merging]
 * [--changelog --dstl-path URI] [--parallelism 2] [--rate 2000] [--value-bytes 200] [--keys 20000]
 * [--num-retained 2] [--interval 1s] [--hold-checkpoints-file F]
 * [-Dkey=value ...]}.
 *
 * <p>Prints {@code CKGUARD-EVENT} lines (see {@link Events}); exit code 0 when stopped on request,
 * 3 when the job failed (e.g. a restore failed), 2 on bad arguments.
 */
public final class Job {
  private Job() {}

  public static void main(String[] argv) throws Exception {
    Map<String, String> a = new HashMap<>();
    Map<String, String> extra = new HashMap<>();
    for (int i = 0; i < argv.length; i++) {
      String k = argv[i];
      if (k.startsWith("-D") && k.contains("=")) {
        int eq = k.indexOf('=');
        extra.put(k.substring(2, eq), k.substring(eq + 1));
      } else if (k.equals("--file-merging") || k.equals("--changelog") || k.equals("--async-state")) {
        a.put(k, "true");
      } else if (k.startsWith("--") && i + 1 < argv.length) {
        a.put(k, argv[++i]);
      } else {
        System.err.println("bad argument: " + k);
        System.exit(2);
      }
    }
    String cpDir = a.get("--checkpoint-dir");
    if (cpDir == null) {
      System.err.println("--checkpoint-dir is required");
      System.exit(2);
    }
    int parallelism = Integer.parseInt(a.getOrDefault("--parallelism", "2"));
    long rate = Long.parseLong(a.getOrDefault("--rate", "2000"));
    int valueBytes = Integer.parseInt(a.getOrDefault("--value-bytes", "200"));
    int keys = Integer.parseInt(a.getOrDefault("--keys", "20000"));
    Duration duration = parseDuration(a.getOrDefault("--duration", "0s"));
    long stopAfter = Long.parseLong(a.getOrDefault("--stop-after-checkpoints", "0"));
    String stopFile = a.get("--stop-file");
    String failFile = a.get("--fail-file");

    Map<String, String> c = new HashMap<>();
    c.put("state.backend.type", "rocksdb");
    c.put("state.backend.incremental", "true");
    c.put("execution.checkpointing.incremental", "true");
    c.put("state.checkpoint-storage", "filesystem");
    c.put("execution.checkpointing.storage", "filesystem");
    c.put("state.checkpoints.dir", cpDir);
    c.put("execution.checkpointing.dir", cpDir);
    c.put("execution.checkpointing.interval", a.getOrDefault("--interval", "1s"));
    c.put("execution.checkpointing.min-pause", "200ms");
    c.put("execution.checkpointing.timeout", "60s");
    c.put("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION");
    c.put("state.checkpoints.num-retained", a.getOrDefault("--num-retained", "2"));
    c.put("execution.checkpointing.num-retained", a.getOrDefault("--num-retained", "2"));
    c.put("state.backend.rocksdb.options-factory", NoCompactionOptions.class.getName());
    // Small memtables so each checkpoint's flush produces its own SST of a few hundred KB.
    c.put("state.backend.rocksdb.memory.managed", "false");
    c.put("state.backend.rocksdb.writebuffer.size", "4mb");
    c.put("state.backend.local-recovery", "false");
    c.put("execution.state-recovery.from-local", "false");
    // Failure-rate restarts: an induced failure restarts the job; a restore that keeps failing
    // (missing files) exhausts the budget within seconds and fails the job, which we report.
    c.put("restart-strategy.type", "failure-rate");
    c.put("restart-strategy.failure-rate.max-failures-per-interval", "3");
    c.put("restart-strategy.failure-rate.failure-rate-interval", "10s");
    c.put("restart-strategy.failure-rate.delay", "300ms");
    c.put("taskmanager.numberOfTaskSlots", Integer.toString(parallelism));
    c.put("taskmanager.memory.managed.size", "64m");
    c.put("taskmanager.memory.network.min", "16m");
    c.put("taskmanager.memory.network.max", "16m");
    String restore = a.get("--restore");
    if (restore != null) {
      String mode = a.getOrDefault("--claim-mode", "NO_CLAIM");
      c.put("execution.savepoint.path", restore);
      c.put("execution.state-recovery.path", restore);
      c.put("execution.savepoint-restore-mode", mode);
      c.put("execution.state-recovery.claim-mode", mode);
    }
    if (a.containsKey("--file-merging")) {
      c.put("execution.checkpointing.file-merging.enabled", "true");
    }
    if (a.containsKey("--changelog")) {
      String dstl = a.get("--dstl-path");
      if (dstl == null) {
        System.err.println("--changelog needs --dstl-path");
        System.exit(2);
      }
      c.put("state.changelog.enabled", "true");
      c.put("state.changelog.storage", "filesystem");
      c.put("dstl.dfs.base-path", dstl);
      c.put("state.changelog.dstl.dfs.base-path", dstl);
      c.put("state.changelog.periodic-materialize.interval", "3s");
    }
    c.putAll(extra);
    Configuration conf = Configuration.fromMap(c);
    // A local environment never initializes Flink's file system registry with the job's
    // configuration, so file system options given with -D (fs.allowed-fallback-filesystems=s3a to
    // let Hadoop's S3A serve s3a://, flink.hadoop.fs.s3a.* for its endpoint and keys) would be
    // ignored. Only then: the plain file:// runs keep the registry's defaults.
    if (extra.keySet().stream().anyMatch(k -> k.startsWith("fs.") || k.startsWith("flink.hadoop."))) {
      FileSystem.initialize(conf, null);
    }

    StreamExecutionEnvironment env =
        StreamExecutionEnvironment.createLocalEnvironment(parallelism, conf);
    DataGeneratorSource<Long> source =
        new DataGeneratorSource<>(
            n -> n, Long.MAX_VALUE, RateLimiterStrategy.perSecond(rate), Types.LONG);
    KeyedStream<Long, Long> keyed =
        env.fromSource(source, WatermarkStrategy.noWatermarks(), "ckguard-source")
            .uid("ckguard-source")
            .name("ckguard-source")
            .keyBy(new KeyOf(keys));
    // --async-state: Flink 2.x's asynchronous state API (with ForSt, the database on the checkpoint
    // file system); otherwise the synchronous StatefulFunction.
    SingleOutputStreamOperator<Long> stateful =
        a.containsKey("--async-state")
            ? AsyncState.apply(keyed, valueBytes, failFile, cpDir)
            : keyed.process(new StatefulFunction(valueBytes, failFile, cpDir));
    SingleOutputStreamOperator<Long> last = stateful.uid("ckguard-state").name("ckguard-state");
    String holdFile = a.get("--hold-checkpoints-file");
    if (holdFile != null) {
      // Its own task: the stateful task's snapshot completes (its files uploaded) while this one's
      // waits.
      last =
          last.map(new CheckpointControl(holdFile))
              .uid("ckguard-control")
              .name("ckguard-control")
              .disableChaining();
    }
    last
        .sinkTo(new DiscardingSink<>())
        .uid("ckguard-sink")
        .name("ckguard-sink");

    JobClient client = env.executeAsync("ckguard-e2e");
    Events.emit(
        "job-started",
        "job-id=" + client.getJobID() + " checkpoint-dir=" + cpDir
            + " restore=" + (restore == null ? "-" : restore)
            + " claim-mode=" + a.getOrDefault("--claim-mode", "-"));

    // Taken once, right away: the local environment shuts its MiniCluster down when the job ends,
    // after which status calls fail, but this future still completes with the outcome.
    CompletableFuture<JobExecutionResult> result = client.getJobExecutionResult();
    long deadline = duration.isZero() ? Long.MAX_VALUE : System.nanoTime() + duration.toNanos();
    String why = null;
    while (why == null) {
      if (result.isDone()) {
        break;
      }
      if (System.nanoTime() > deadline) {
        why = "duration";
      } else if (stopAfter > 0 && Events.COMPLETED.get() >= stopAfter) {
        why = "checkpoints";
      } else if (stopFile != null && new File(stopFile).exists()) {
        why = "stop-file";
      } else {
        Thread.sleep(100);
      }
    }
    if (why != null) {
      try {
        client.cancel().get(60, TimeUnit.SECONDS);
      } catch (Exception e) {
        // The job ended on its own in the meantime; its result below says how.
      }
    }
    try {
      result.get(120, TimeUnit.SECONDS);
      Events.emit("job-finished", "reason=" + why + " last-checkpoint=" + Events.LAST_COMPLETED_ID.get());
    } catch (Exception e) {
      if (why != null) {
        // Cancelled on request: the cancellation surfaces as an exception from the result future.
        Events.emit(
            "job-stopped",
            "reason=" + why + " last-checkpoint=" + Events.LAST_COMPLETED_ID.get()
                + " checkpoints=" + Events.COMPLETED.get());
        System.exit(0);
      }
      String cause = describe(e);
      if (isRestoreFailure(e)) {
        Events.emit("restore-failed", "cause=" + cause);
      }
      Events.emit("job-failed", "cause=" + cause);
      StringWriter sw = new StringWriter();
      e.printStackTrace(new PrintWriter(sw));
      System.err.println(sw);
      System.exit(3);
    }
    System.exit(0);
  }

  static Duration parseDuration(String s) {
    s = s.trim();
    if (s.endsWith("ms")) {
      return Duration.ofMillis(Long.parseLong(s.substring(0, s.length() - 2)));
    }
    if (s.endsWith("s")) {
      return Duration.ofSeconds(Long.parseLong(s.substring(0, s.length() - 1)));
    }
    if (s.endsWith("m")) {
      return Duration.ofMinutes(Long.parseLong(s.substring(0, s.length() - 1)));
    }
    return Duration.ofSeconds(Long.parseLong(s));
  }

  /** The cause chain on one line, so the Go driver can match the missing-file error. */
  static String describe(Throwable t) {
    List<String> parts = new ArrayList<>();
    for (Throwable x = t; x != null && parts.size() < 20; x = x.getCause()) {
      parts.add(x.getClass().getName() + ": " + String.valueOf(x.getMessage()).replace('\n', ' '));
      if (x.getCause() == x) {
        break;
      }
    }
    return String.join(" <- ", parts);
  }

  static boolean isRestoreFailure(Throwable t) {
    for (Throwable x = t; x != null; x = x.getCause()) {
      String n = x.getClass().getName();
      String m = String.valueOf(x.getMessage());
      if (n.endsWith("FileNotFoundException")
          || n.endsWith("NoSuchFileException")
          || m.contains("restore")
          || m.contains("Restore")) {
        return true;
      }
      if (x.getCause() == x) {
        break;
      }
    }
    return false;
  }

  /** Touched by nothing but the tests; Files is used so the marker poll has no Flink dependency. */
  static boolean consume(String marker) {
    try {
      return marker != null && Files.deleteIfExists(Path.of(marker));
    } catch (Exception e) {
      return false;
    }
  }
}
