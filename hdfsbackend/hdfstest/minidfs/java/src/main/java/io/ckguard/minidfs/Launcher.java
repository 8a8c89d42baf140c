package io.ckguard.minidfs;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.security.PrivilegedExceptionAction;
import java.util.Arrays;
import java.util.Base64;
import java.util.List;
import java.util.stream.Stream;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.FsShell;
import org.apache.hadoop.hdfs.DistributedFileSystem;
import org.apache.hadoop.hdfs.MiniDFSCluster;
import org.apache.hadoop.fs.SafeModeAction;
import org.apache.hadoop.security.UserGroupInformation;
import org.apache.hadoop.util.ToolRunner;

/**
 * One NameNode and one DataNode on 127.0.0.1 (Hadoop's MiniDFSCluster), driven over stdin/stdout by the
 * Go package minidfs. Protocol (one line each way, fields separated by TAB, UTF-8):
 *
 * <pre>
 *   launcher → READY port=PORT           once the cluster is up (PORT: the NameNode's RPC port)
 *   go       → COMMAND\tARG...
 *   launcher → OK\tEXIT\tBASE64(stdout)\tBASE64(stderr)   or   ERR\tBASE64(message)
 * </pre>
 *
 * Commands: {@code safemode enter|leave}, {@code stopnn}, {@code restartnn} (same port, same name
 * directory), {@code upload LOCAL HDFS} (a local tree, keeping file and directory mtimes),
 * {@code settimes PATH MILLIS}, {@code dfs ARG...} (Hadoop's FsShell, as `hdfs dfs ARG...`),
 * {@code dfsas USER ARG...} (the same as USER), {@code kinit USER CCACHE [SECONDS]} (Kerberos clusters:
 * USER's ticket-granting ticket, from its keytab, stored in the ticket cache file CCACHE; SECONDS > 0
 * asks for a ticket of that lifetime),
 * {@code shutdown}. End of stdin is a shutdown too, so the cluster never outlives its Go process.
 *
 * <p>Arguments: {@code --base-dir DIR} (name and data directories), {@code --trash-minutes M}
 * (fs.trash.interval, whole minutes as Hadoop reads it; 0 is off). Permissions are checked (dfs.permissions.enabled), as on a real cluster;
 * the user running the launcher is the cluster's superuser.
 *
 * <p>{@code --kerberos-dir DIR --protection P --users U1,U2...} secures the cluster instead (see {@link Kdc}):
 * a MiniKdc, Kerberos RPC, block access tokens and SASL data transfer, both with protection P
 * (authentication, integrity or privacy; {@code --no-aes}: privacy without AES). The superuser is
 * then the service principal's short name, hdfs; {@code dfsas} logs in as USER from its keytab; {@code upload} gives what it creates to the first
 * user (the tree is that user's, as a job running as that user would have written it). The READY line
 * then also says {@code realm=REALM kdc=PORT}.
 */
public final class Launcher {
  private final PrintStream proto;
  private final Configuration conf;
  private final MiniDFSCluster cluster;
  private final int port; // the NameNode's RPC port, kept across restarts
  private final Kdc kdc; // null without Kerberos
  private final String owner; // the owner of uploaded trees; null: the superuser

  private Launcher(PrintStream proto, Configuration conf, MiniDFSCluster cluster, Kdc kdc, String owner) {
    this.proto = proto;
    this.conf = conf;
    this.cluster = cluster;
    this.port = cluster.getNameNodePort();
    this.kdc = kdc;
    this.owner = owner;
  }

  public static void main(String[] args) throws Exception {
    // The protocol owns the real stdout; anything Hadoop prints goes to stderr.
    PrintStream proto = new PrintStream(new FileOutputStreamNoClose(System.out), true, StandardCharsets.UTF_8);
    System.setOut(System.err);
    String baseDir = null;
    long trashMinutes = 0;
    String krbDir = null;
    String protection = "authentication";
    boolean aes = true;
    List<String> users = List.of();
    for (int i = 0; i < args.length; i++) {
      switch (args[i]) {
        case "--base-dir" -> baseDir = args[++i];
        case "--trash-minutes" -> trashMinutes = Long.parseLong(args[++i]);
        case "--kerberos-dir" -> krbDir = args[++i];
        case "--protection" -> protection = args[++i];
        case "--no-aes" -> aes = false;
        case "--users" -> users = Arrays.asList(args[++i].split(","));
        default -> throw new IllegalArgumentException("unknown argument " + args[i]);
      }
    }
    if (baseDir == null) {
      throw new IllegalArgumentException("--base-dir is required");
    }
    Configuration conf = new Configuration();
    conf.set(MiniDFSCluster.HDFS_MINIDFS_BASEDIR, baseDir);
    conf.setBoolean("dfs.permissions.enabled", true);
    conf.setLong("fs.trash.interval", trashMinutes);
    conf.set("dfs.namenode.rpc-bind-host", "127.0.0.1");
    conf.set("dfs.datanode.address", "127.0.0.1:0");
    conf.set("dfs.datanode.http.address", "127.0.0.1:0");
    conf.set("dfs.datanode.ipc.address", "127.0.0.1:0");
    conf.set("dfs.namenode.http-address", "127.0.0.1:0");
    // Small test trees: a block per file is fine, replication 1 (one DataNode), fast safe-mode exit.
    conf.setInt("dfs.replication", 1);
    conf.setInt("dfs.namenode.safemode.extension", 0);
    conf.setLong("dfs.heartbeat.interval", 1);
    Kdc kdc = null;
    if (krbDir != null) {
      if (users.isEmpty()) {
        throw new IllegalArgumentException("--kerberos-dir needs --users");
      }
      kdc = Kdc.start(new File(krbDir), users);
      kdc.secure(conf, protection, protection, aes);
      conf.set("dfs.namenode.https-address", "127.0.0.1:0");
      conf.set("dfs.datanode.https.address", "127.0.0.1:0");
      kdc.writeClientConf(conf);
      // Before any login: UserGroupInformation reads the authentication method once per JVM.
      UserGroupInformation.setConfiguration(conf);
    }
    MiniDFSCluster cluster = new MiniDFSCluster.Builder(conf, new File(baseDir))
        .numDataNodes(1)
        .nameNodePort(0)
        .format(true)
        .build();
    cluster.waitActive();
    Launcher l = new Launcher(proto, conf, cluster, kdc, kdc == null ? null : users.get(0));
    proto.println("READY port=" + l.port + (kdc == null ? "" : " realm=" + kdc.realm() + " kdc=" + kdc.port()));
    try {
      l.serve(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
    } finally {
      cluster.shutdown(true);
      if (kdc != null) {
        kdc.stop();
        // The Go side may be gone (a test binary exits without waiting): the KDC's files go with it.
        deleteTree(Paths.get(krbDir));
      }
      proto.flush();
    }
    System.exit(0);
  }

  private void serve(BufferedReader in) throws IOException {
    for (String line; (line = in.readLine()) != null; ) {
      String[] f = line.split("\t", -1);
      if (f[0].equals("shutdown")) {
        proto.println("OK\t0\t\t");
        return;
      }
      try {
        proto.println(handle(f));
      } catch (Throwable e) {
        ByteArrayOutputStream b = new ByteArrayOutputStream();
        e.printStackTrace(new PrintStream(b, true, StandardCharsets.UTF_8));
        proto.println("ERR\t" + b64(b.toByteArray()));
      }
    }
  }

  private String handle(String[] f) throws Exception {
    String[] a = Arrays.copyOfRange(f, 1, f.length);
    switch (f[0]) {
      case "safemode" -> {
        SafeModeAction act = switch (a[0]) {
          case "enter" -> SafeModeAction.ENTER;
          case "leave" -> SafeModeAction.LEAVE;
          default -> throw new IllegalArgumentException("safemode enter|leave, not " + a[0]);
        };
        cluster.getFileSystem().setSafeMode(act);
        return ok(0, "", "");
      }
      case "stopnn" -> {
        cluster.shutdownNameNode(0);
        return ok(0, "", "");
      }
      case "restartnn" -> {
        cluster.restartNameNode(0, true);
        cluster.waitActive();
        if (cluster.getNameNodePort() != port) {
          throw new IOException("NameNode came back on port " + cluster.getNameNodePort() + ", not " + port);
        }
        return ok(0, "", "");
      }
      case "upload" -> {
        upload(Paths.get(a[0]), new org.apache.hadoop.fs.Path(a[1]));
        return ok(0, "", "");
      }
      case "settimes" -> {
        cluster.getFileSystem().setTimes(new org.apache.hadoop.fs.Path(a[0]), Long.parseLong(a[1]), -1);
        return ok(0, "", "");
      }
      case "dfs" -> {
        return shell(a);
      }
      case "dfsas" -> {
        // The shell as another user (simple authentication: the name is trusted), for permission tests.
        // On a Kerberos cluster the user logs in from its keytab (a name alone authenticates nobody).
        UserGroupInformation ugi = kdc == null
            ? UserGroupInformation.createRemoteUser(a[0])
            : UserGroupInformation.loginUserFromKeytabAndReturnUGI(kdc.principal(a[0]), kdc.keytab(a[0]).getAbsolutePath());
        String[] rest = Arrays.copyOfRange(a, 1, a.length);
        return ugi.doAs((PrivilegedExceptionAction<String>) () -> shell(rest));
      }
      case "kinit" -> {
        if (kdc == null) {
          throw new IllegalStateException("kinit: this cluster has no Kerberos");
        }
        kdc.kinit(a[0], new File(a[1]), a.length > 2 ? Integer.parseInt(a[2]) : 0);
        return ok(0, "", "");
      }
      default -> throw new IllegalArgumentException("unknown command " + f[0]);
    }
  }

  // Copies a local tree to HDFS; every file and directory gets its local mtime (directories last, since
  // creating a child changes its parent's mtime).
  private void upload(Path local, org.apache.hadoop.fs.Path dst) throws IOException {
    DistributedFileSystem fs = cluster.getFileSystem();
    if (Files.isDirectory(local)) {
      fs.mkdirs(dst);
      try (Stream<Path> s = Files.list(local)) {
        for (Path c : (Iterable<Path>) s.sorted()::iterator) {
          upload(c, new org.apache.hadoop.fs.Path(dst, c.getFileName().toString()));
        }
      }
    } else if (Files.isRegularFile(local)) {
      try (InputStream in = Files.newInputStream(local); OutputStream out = fs.create(dst, true)) {
        in.transferTo(out);
      }
    } else {
      throw new IOException("upload: " + local + " is neither a regular file nor a directory");
    }
    if (owner != null) {
      fs.setOwner(dst, owner, null);
    }
    fs.setTimes(dst, Files.getLastModifiedTime(local).toMillis(), -1);
  }

  // Runs FsShell in this JVM with the cluster's configuration, capturing what it prints.
  private synchronized String shell(String[] args) throws Exception {
    ByteArrayOutputStream out = new ByteArrayOutputStream();
    ByteArrayOutputStream err = new ByteArrayOutputStream();
    PrintStream oldOut = System.out;
    PrintStream oldErr = System.err;
    int rc;
    Configuration c = new Configuration(conf);
    c.set("fs.defaultFS", "hdfs://127.0.0.1:" + port);
    // A stopped NameNode is an error after a second, not after the client's default minute of retries.
    c.setInt("ipc.client.connect.max.retries", 1);
    c.setInt("ipc.client.connect.retry.interval", 200);
    c.setInt("ipc.client.connect.max.retries.on.timeouts", 1);
    try (PrintStream po = new PrintStream(out, true, StandardCharsets.UTF_8);
         PrintStream pe = new PrintStream(err, true, StandardCharsets.UTF_8)) {
      System.setOut(po);
      System.setErr(pe);
      FsShell sh = new FsShell(c);
      try {
        rc = ToolRunner.run(sh, args);
      } finally {
        sh.close();
        System.setOut(oldOut);
        System.setErr(oldErr);
      }
    }
    return ok(rc, out.toString(StandardCharsets.UTF_8), err.toString(StandardCharsets.UTF_8));
  }

  private static void deleteTree(Path p) throws IOException {
    if (!Files.exists(p)) {
      return;
    }
    try (Stream<Path> s = Files.walk(p)) {
      for (Path c : (Iterable<Path>) s.sorted(java.util.Comparator.reverseOrder())::iterator) {
        Files.deleteIfExists(c);
      }
    }
  }

  private static String ok(int rc, String out, String err) {
    return "OK\t" + rc + "\t" + b64(out.getBytes(StandardCharsets.UTF_8)) + "\t" + b64(err.getBytes(StandardCharsets.UTF_8));
  }

  private static String b64(byte[] b) {
    return Base64.getEncoder().encodeToString(b);
  }

  /** The original stdout, which System.setOut must not close or replace. */
  private static final class FileOutputStreamNoClose extends OutputStream {
    private final OutputStream out;

    FileOutputStreamNoClose(OutputStream out) {
      this.out = out;
    }

    @Override public void write(int b) throws IOException { out.write(b); }
    @Override public void write(byte[] b, int off, int len) throws IOException { out.write(b, off, len); }
    @Override public void flush() throws IOException { out.flush(); }
  }
}
