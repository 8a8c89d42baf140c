package minidfs

import (
	"context"
	"io"
	"os/user"
	"path"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// DialSuperuser returns a Go client of the cluster, rooted at dir (its Resolved location names dir),
// acting as the user the tests run as: the NameNode's superuser, whom no permission check stops
// (simple authentication; a Kerberos cluster fails the test, its clients log in from a keytab). The
// client is closed when the test ends.
func (c *Cluster) DialSuperuser(t testing.TB, dir string) (*hdfsclient.Client, hdfsclient.Resolved) {
	t.Helper()
	if c.krb != nil {
		t.Fatal("minidfs: DialSuperuser on a Kerberos cluster (log in from a keytab: Kerberos.Setenv)")
	}
	u, err := user.Current()
	if err != nil {
		t.Fatalf("minidfs: the tests' user: %v", err)
	}
	l, err := hdfsclient.ParseLocation(c.URI(dir))
	if err != nil {
		t.Fatal(err)
	}
	res, err := hdfsclient.Resolve(l, nil)
	if err != nil {
		t.Fatal(err)
	}
	cl, err := hdfsclient.Dial(context.Background(), hdfsclient.Config{Resolved: res, User: u.Username, RPCTimeout: 20 * time.Second})
	if err != nil {
		t.Fatalf("minidfs: dial %s: %v", c.URI(dir), err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl, res
}

// WriteFile writes the file p through cl (its folders made, mode 0755; the file 0644) with data.
func WriteFile(t testing.TB, cl hdfsclient.FS, p, data string) {
	t.Helper()
	ctx := context.Background()
	if err := cl.MkdirAll(ctx, path.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := cl.Create(ctx, p, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if data != "" { // an empty file is created and closed: no block
		if _, err := io.WriteString(w, data); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}
