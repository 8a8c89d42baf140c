package hdfsclient

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestAuthHint: an authentication failure at the first calls names the fix (the flags, kinit,
// core-site.xml) and keeps the cause; any other failure is returned as it is.
func TestAuthHint(t *testing.T) {
	krb := Config{Kerberos: Kerberos{Enabled: true}}
	simple := Config{User: "flink"}
	kt := krbLogin{keytab: "/etc/flink.keytab", principal: "flink@EX.COM", krb5Conf: "/etc/krb5.conf"}
	cc := krbLogin{ccache: "/tmp/krb5cc_0", krb5Conf: "/etc/krb5.conf"}
	sasl := errors.New("no available namenodes: SASL handshake: KDC_ERR_C_PRINCIPAL_UNKNOWN")
	seq := errors.New("stat /: unexpected sequence number")
	refused := errors.New("dial tcp 127.0.0.1:8020: connection refused")
	pipe := errors.New("stat /: no available namenodes: write tcp 127.0.0.1:46384->127.0.0.1:8020: write: broken pipe")
	reset := errors.New("stat /: no available namenodes: read tcp 127.0.0.1:46384->127.0.0.1:8020: read: connection reset by peer")
	tests := []struct {
		name string
		cfg  Config
		l    krbLogin
		err  error
		want []string // nil: err unchanged
	}{
		{"keytab rejected", krb, kt, sasl, []string{"flink@EX.COM", "/etc/flink.keytab", "--hdfs-keytab", "--hdfs-principal", "klist -kt", "/etc/krb5.conf"}},
		{"ticket cache rejected", krb, cc, sasl, []string{"/tmp/krb5cc_0", "kinit", "--hdfs-keytab"}},
		{"simple authentication against Kerberos", simple, krbLogin{}, seq, []string{"flink", "hadoop.security.authentication=kerberos", "HADOOP_CONF_DIR", "KRB5CCNAME"}},
		{"simple authentication against Kerberos, the close first", simple, krbLogin{}, pipe, []string{"flink", "hadoop.security.authentication=kerberos"}},
		{"simple authentication against Kerberos, reset", simple, krbLogin{}, reset, []string{"hadoop.security.authentication=kerberos"}},
		{"Kerberos, NameNode down", krb, kt, refused, nil},
		{"simple, NameNode down", simple, krbLogin{}, refused, nil},
		{"Kerberos, protocol error", krb, kt, seq, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := authHint(tc.cfg, tc.l, tc.err)
			if !errors.Is(got, tc.err) {
				t.Errorf("the cause is lost: %v", got)
			}
			if tc.want == nil {
				if got != tc.err {
					t.Errorf("got %q, want the error unchanged", got)
				}
				return
			}
			for _, w := range tc.want {
				if !strings.Contains(got.Error(), w) {
					t.Errorf("%q does not name %q", got, w)
				}
			}
		})
	}
}

// TestKerberosClientRefusesOtherCacheTypes: KEYRING:, DIR: and other non-file ticket caches are
// refused with the way to a file cache, never read as a file of that name.
func TestKerberosClientRefusesOtherCacheTypes(t *testing.T) {
	conf := filepath.Join(t.TempDir(), "krb5.conf")
	if err := os.WriteFile(conf, []byte("[libdefaults]\n  default_realm = EX.COM\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, cc := range []string{"KEYRING:persistent:0", "DIR:/run/user/0/krb5cc", "KCM:0"} {
		_, _, err := kerberosClient(Kerberos{Enabled: true, CCache: cc, Krb5Conf: conf})
		if err == nil || !strings.Contains(err.Error(), "FILE:") || !strings.Contains(err.Error(), "--hdfs-keytab") {
			t.Errorf("%s: err = %v, want a refusal naming FILE: and --hdfs-keytab", cc, err)
		}
	}
}
