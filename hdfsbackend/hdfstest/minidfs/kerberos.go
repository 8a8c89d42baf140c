package minidfs

import (
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// Kerberos is a Kerberos cluster's realm and the files its clients need. The files live as long as
// the cluster.
type Kerberos struct {
	// Realm is the KDC's realm (CKGUARD.TEST).
	Realm string
	dir   string
	c     *Cluster
}

// Kerberos is the cluster's Kerberos realm; nil on a cluster with simple authentication.
func (c *Cluster) Kerberos() *Kerberos { return c.krb }

// Krb5Conf is the krb5.conf naming the realm's KDC (for KRB5_CONFIG): TCP, no DNS, no reverse lookups.
func (k *Kerberos) Krb5Conf() string { return filepath.Join(k.dir, "krb5.conf") }

// ConfDir is a HADOOP_CONF_DIR for the cluster's clients: core-site.xml with
// hadoop.security.authentication=kerberos and hadoop.rpc.protection, hdfs-site.xml with
// dfs.namenode.kerberos.principal (hdfs/127.0.0.1@REALM) and dfs.data.transfer.protection.
func (k *Kerberos) ConfDir() string { return filepath.Join(k.dir, "conf") }

// Principal is user@REALM.
func (k *Kerberos) Principal(user string) string { return user + "@" + k.Realm }

// Keytab is the keytab of User or Other (readable by the tests' process only).
func (k *Kerberos) Keytab(user string) string { return filepath.Join(k.dir, user+".keytab") }

// Setenv points this test's Hadoop and Kerberos clients at the cluster: HADOOP_CONF_DIR (ConfDir)
// and KRB5_CONFIG (Krb5Conf), for the test's duration; KRB5CCNAME is unset.
func (k *Kerberos) Setenv(t testing.TB) {
	t.Helper()
	t.Setenv("HADOOP_CONF_DIR", k.ConfDir())
	t.Setenv("KRB5_CONFIG", k.Krb5Conf())
	t.Setenv("KRB5CCNAME", "")
}

// Kinit logs user in from its keytab and writes the ticket-granting ticket to the ticket cache file
// ccache, as `kinit -kt KEYTAB user@REALM` with KRB5CCNAME=FILE:ccache would (Apache Kerby's client,
// in the cluster's JVM: no MIT tools needed).
func (k *Kerberos) Kinit(t testing.TB, user, ccache string) {
	t.Helper()
	abs, err := filepath.Abs(ccache)
	if err != nil {
		t.Fatal(err)
	}
	k.c.must(t, "kinit", user, abs)
	t.Logf("minidfs: ticket cache of %s in %s", k.Principal(user), abs)
}

// KinitFor is Kinit with a ticket that ends lifetime from now (whole seconds, at least one), as
// `kinit -l` would: for tests of a ticket's expiry. The KDC's maximum is a day.
func (k *Kerberos) KinitFor(t testing.TB, user, ccache string, lifetime time.Duration) {
	t.Helper()
	secs := int(lifetime / time.Second)
	if secs < 1 {
		t.Fatalf("minidfs: KinitFor %v: want at least a second", lifetime)
	}
	abs, err := filepath.Abs(ccache)
	if err != nil {
		t.Fatal(err)
	}
	k.c.must(t, "kinit", user, abs, strconv.Itoa(secs))
	t.Logf("minidfs: ticket cache of %s in %s, ticket for %ds", k.Principal(user), abs, secs)
}
