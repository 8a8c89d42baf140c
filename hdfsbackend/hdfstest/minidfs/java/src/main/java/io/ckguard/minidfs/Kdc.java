package io.ckguard.minidfs;

import java.io.File;
import java.io.FileOutputStream;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import java.util.Properties;

import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.minikdc.MiniKdc;
import org.apache.kerby.KOptions;
import org.apache.kerby.kerberos.kerb.client.KrbClient;
import org.apache.kerby.kerberos.kerb.client.KrbOption;
import org.apache.kerby.kerberos.kerb.type.ticket.TgtTicket;

/**
 * A Kerberos realm for a secure MiniDFSCluster: Hadoop's MiniKdc on 127.0.0.1 (TCP), the cluster's
 * service principals and the test users' principals, and the files a client outside this JVM needs,
 * all in one directory:
 *
 * <pre>
 *   krb5.conf          the realm's KDC (KRB5_CONFIG for the Go client; this JVM uses it too)
 *   hdfs.keytab        hdfs/127.0.0.1 and HTTP/127.0.0.1 (NameNode, DataNode, their web servers)
 *   USER.keytab        USER@REALM, one per test user
 *   conf/core-site.xml, conf/hdfs-site.xml   what a client of the cluster must be told (HADOOP_CONF_DIR)
 * </pre>
 *
 * The NameNode and the DataNode share one service principal: they run in one JVM, and Hadoop's login
 * user is one per JVM (the second keytab login would replace the first).
 */
final class Kdc {
  static final String HOST = "127.0.0.1";

  private final MiniKdc kdc;
  private final File dir;
  private final String realm;

  private Kdc(MiniKdc kdc, File dir) {
    this.kdc = kdc;
    this.dir = dir;
    this.realm = kdc.getRealm();
  }

  /** Starts the KDC and creates the service principal and one principal (and keytab) per user. */
  static Kdc start(File dir, List<String> users) throws Exception {
    Properties kc = MiniKdc.createConf();
    kc.setProperty(MiniKdc.KDC_BIND_ADDRESS, HOST);
    kc.setProperty(MiniKdc.ORG_NAME, "CKGUARD");
    kc.setProperty(MiniKdc.ORG_DOMAIN, "TEST");
    MiniKdc m = new MiniKdc(kc, new File(dir, "kdc"));
    m.start();
    Kdc k = new Kdc(m, dir);
    k.writeKrb5Conf();
    m.createPrincipal(k.serviceKeytab(), "hdfs/" + HOST, "HTTP/" + HOST);
    for (String u : users) {
      m.createPrincipal(k.keytab(u), u);
    }
    return k;
  }

  String realm() { return realm; }

  int port() { return kdc.getPort(); }

  String servicePrincipal() { return "hdfs/" + HOST + "@" + realm; }

  String httpPrincipal() { return "HTTP/" + HOST + "@" + realm; }

  File serviceKeytab() { return new File(dir, "hdfs.keytab"); }

  File keytab(String user) { return new File(dir, user + ".keytab"); }

  String principal(String user) { return user + "@" + realm; }

  /**
   * Our own krb5.conf instead of MiniKdc's: TCP only (the KDC has no UDP listener), no DNS and no
   * reverse lookups, so that the service principal stays hdfs/127.0.0.1 on every client (Java would
   * otherwise canonicalize 127.0.0.1 to localhost). This JVM reads it too.
   */
  private void writeKrb5Conf() throws IOException {
    String conf = "[libdefaults]\n"
        + "  default_realm = " + realm + "\n"
        + "  udp_preference_limit = 1\n"
        + "  dns_lookup_kdc = false\n"
        + "  dns_lookup_realm = false\n"
        + "  dns_canonicalize_hostname = false\n"
        + "  rdns = false\n"
        + "  forwardable = true\n"
        + "[realms]\n"
        + "  " + realm + " = {\n"
        + "    kdc = " + HOST + ":" + kdc.getPort() + "\n"
        + "  }\n"
        + "[domain_realm]\n"
        + "  " + HOST + " = " + realm + "\n";
    File f = new File(dir, "krb5.conf");
    Files.writeString(f.toPath(), conf, StandardCharsets.UTF_8);
    System.setProperty("java.security.krb5.conf", f.getAbsolutePath());
  }

  /**
   * Secures conf: Kerberos RPC with protection rpcProtection, block access tokens, SASL on data
   * transfer with dataProtection, with AES for privacy when aes (DataNode ports above 1024 are
   * allowed for the test: ignore.secure.ports.for.testing, instead of HTTPS for the web servers).
   */
  void secure(Configuration conf, String rpcProtection, String dataProtection, boolean aes) {
    conf.set("hadoop.security.authentication", "kerberos");
    conf.set("hadoop.security.authorization", "true");
    conf.set("hadoop.rpc.protection", rpcProtection);
    conf.set("dfs.namenode.kerberos.principal", servicePrincipal());
    conf.set("dfs.namenode.keytab.file", serviceKeytab().getAbsolutePath());
    conf.set("dfs.datanode.kerberos.principal", servicePrincipal());
    conf.set("dfs.datanode.keytab.file", serviceKeytab().getAbsolutePath());
    conf.set("dfs.web.authentication.kerberos.principal", httpPrincipal());
    conf.set("dfs.web.authentication.kerberos.keytab", serviceKeytab().getAbsolutePath());
    conf.setBoolean("dfs.block.access.token.enable", true);
    conf.set("dfs.data.transfer.protection", dataProtection);
    if (dataProtection.equals("privacy") && aes) {
      // AES for the data, as privacy clusters are usually set up (DIGEST-MD5's own ciphers, 3DES and
      // RC4, are slow); without it the data goes under DIGEST-MD5's confidentiality layer.
      conf.set("dfs.encrypt.data.transfer.cipher.suites", "AES/CTR/NoPadding");
    }
    conf.setBoolean("ignore.secure.ports.for.testing", true);
  }

  /** Writes the client side of conf (what an HDFS client must know) to dir/conf. */
  void writeClientConf(Configuration conf) throws IOException {
    File cd = new File(dir, "conf");
    if (!cd.isDirectory() && !cd.mkdirs()) {
      throw new IOException("cannot create " + cd);
    }
    Configuration core = new Configuration(false);
    for (String k : new String[] {"hadoop.security.authentication", "hadoop.rpc.protection"}) {
      core.set(k, conf.get(k));
    }
    Configuration hdfs = new Configuration(false);
    for (String k : new String[] {"dfs.namenode.kerberos.principal", "dfs.data.transfer.protection", "dfs.block.access.token.enable"}) {
      hdfs.set(k, conf.get(k));
    }
    try (OutputStream o = new FileOutputStream(new File(cd, "core-site.xml"))) {
      core.writeXml(o);
    }
    try (OutputStream o = new FileOutputStream(new File(cd, "hdfs-site.xml"))) {
      hdfs.writeXml(o);
    }
  }

  /**
   * Logs user in from its keytab and stores the ticket-granting ticket in the ticket cache ccache, as
   * kinit -kt would; lifetimeSeconds > 0 asks for a ticket that ends that many seconds from now (kinit
   * -l), 0 for the KDC's default (a day).
   */
  void kinit(String user, File ccache, int lifetimeSeconds) throws Exception {
    KrbClient c = new KrbClient();
    c.setKdcRealm(realm);
    c.setKdcHost(HOST);
    c.setKdcTcpPort(kdc.getPort());
    c.setAllowUdp(false);
    c.setAllowTcp(true);
    c.init();
    KOptions o = new KOptions();
    o.add(KrbOption.CLIENT_PRINCIPAL, principal(user));
    o.add(KrbOption.USE_KEYTAB, true);
    o.add(KrbOption.KEYTAB_FILE, keytab(user));
    if (lifetimeSeconds > 0) {
      o.add(KrbOption.LIFE_TIME, lifetimeSeconds);
    }
    TgtTicket tgt = c.requestTgt(o);
    c.storeTicket(tgt, ccache);
  }

  void stop() {
    kdc.stop();
  }
}
