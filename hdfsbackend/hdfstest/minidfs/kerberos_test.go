//go:build hdfs

package minidfs

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// TestHDFSKerberos: on a kerberized cluster (KDC, Kerberos RPC, block tokens, SASL data transfer, at
// the protection levels authentication, integrity, privacy with AES and privacy without AES, where
// the data goes under DIGEST-MD5's RC4 layer) the Go client logs in from a keytab and from a ticket
// cache, is the principal's short name to HDFS, reads and writes through the DataNode (byte-identical
// both ways with the Java client, across many SASL messages), and is held to the cluster's permission
// checks as another principal; bad or missing credentials fail at Dial with an error that names the
// fix. Integrity and privacy without AES are the levels where the library's own DIGEST-MD5 layers lost
// bytes on every DataNode read (see hdfsclient/dtsasl).
func TestHDFSKerberos(t *testing.T) {
	for _, tc := range []struct {
		name string
		opt  Options
	}{
		{"authentication", Options{Protection: "authentication"}},
		{"integrity", Options{Protection: "integrity"}},
		{"privacy", Options{Protection: "privacy"}},
		{"privacy without AES", Options{Protection: "privacy", NoAES: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opt.Kerberos, tc.opt.Exclusive = true, true
			testKerberos(t, tc.opt)
		})
	}
}

func testKerberos(t *testing.T, opt Options) {
	c := Start(t, opt)
	k := c.Kerberos()
	ctx := context.Background()
	dial := func(t *testing.T, krb hdfsclient.Kerberos) (*hdfsclient.Client, error) {
		t.Helper()
		cfg, err := hdfsclient.ConfigFromEnv(c.URI(c.Root()), krb)
		if err != nil {
			return nil, err
		}
		cl, err := hdfsclient.Dial(ctx, cfg)
		if err == nil {
			t.Cleanup(func() { _ = cl.Close() })
		}
		return cl, err
	}
	withKeytab := func(user string) hdfsclient.Kerberos {
		return hdfsclient.Kerberos{Keytab: k.Keytab(user), Principal: k.Principal(user)}
	}

	local := t.TempDir()
	if err := os.WriteFile(filepath.Join(local, "sst"), []byte("uploaded by the Java client"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.Upload(t, local, c.Root()+"/up")

	logins := []struct {
		name  string
		login func(t *testing.T) hdfsclient.Kerberos
	}{
		{"keytab", func(t *testing.T) hdfsclient.Kerberos { return withKeytab(User) }},
		{"keytab, NameNode principal with _HOST", func(t *testing.T) hdfsclient.Kerberos {
			// As production hdfs-site.xml files say it: the client puts the NameNode's host in.
			dir := t.TempDir()
			b, err := os.ReadFile(filepath.Join(k.ConfDir(), "hdfs-site.xml"))
			if err != nil {
				t.Fatal(err)
			}
			site := strings.Replace(string(b), "hdfs/127.0.0.1@", "hdfs/_HOST@", 1)
			if site == string(b) {
				t.Fatalf("no hdfs/127.0.0.1@ in the client's hdfs-site.xml:\n%s", b)
			}
			if err := os.WriteFile(filepath.Join(dir, "hdfs-site.xml"), []byte(site), 0o644); err != nil {
				t.Fatal(err)
			}
			core, err := os.ReadFile(filepath.Join(k.ConfDir(), "core-site.xml"))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "core-site.xml"), core, 0o644); err != nil {
				t.Fatal(err)
			}
			t.Setenv("HADOOP_CONF_DIR", dir)
			return withKeytab(User)
		}},
		{"ticket cache", func(t *testing.T) hdfsclient.Kerberos {
			cc := filepath.Join(t.TempDir(), "krb5cc_test")
			k.Kinit(t, User, cc)
			t.Setenv("KRB5CCNAME", "FILE:"+cc)
			return hdfsclient.Kerberos{}
		}},
	}
	for _, tc := range logins {
		t.Run(tc.name, func(t *testing.T) {
			k.Setenv(t)
			cl, err := dial(t, tc.login(t))
			if err != nil {
				t.Fatalf("dial: %v", err)
			}
			if cl.User() != User {
				t.Errorf("HDFS user %q, want %q", cl.User(), User)
			}
			r, err := cl.Open(ctx, c.Root()+"/up/sst")
			if err != nil {
				t.Fatal(err)
			}
			b, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
			_ = r.Close()
			if err != nil || string(b) != "uploaded by the Java client" {
				t.Fatalf("read through the DataNode: %q, %v", b, err)
			}
			name := c.Root() + "/from-go-" + sanitize(tc.name)
			w, err := cl.Create(ctx, name, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte("written by the Go client")); err != nil {
				t.Fatal(err)
			}
			if err := w.Close(); err != nil {
				t.Fatalf("write through the DataNode: %v", err)
			}
			if out, err := c.DFS(t, "-cat", name); err != nil || out != "written by the Go client" {
				t.Fatalf("the Java client reads %q, %v", out, err)
			}
			if out, err := c.DFS(t, "-stat", "%u", name); err != nil || strings.TrimSpace(out) != User {
				t.Errorf("owner of what the Go client wrote: %q, %v; want %s", out, err, User)
			}
		})
	}

	t.Run("a large file both ways", func(t *testing.T) {
		// 1 MiB: sixteen and more 64 KiB packets, each one or more SASL messages, read with the
		// buffer sizes the readers pick; printable, so the Java client's output compares as text.
		k.Setenv(t)
		cl, err := dial(t, withKeytab(User))
		if err != nil {
			t.Fatal(err)
		}
		data := make([]byte, 1<<20)
		if _, err := rand.Read(data[:len(data)/2]); err != nil {
			t.Fatal(err)
		}
		hex.Encode(data, data[:len(data)/2])
		local := t.TempDir()
		if err := os.WriteFile(filepath.Join(local, "big"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		c.Upload(t, local, c.Root()+"/big-up")
		r, err := cl.Open(ctx, c.Root()+"/big-up/big")
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
		_ = r.Close()
		if err != nil || !bytes.Equal(got, data) {
			t.Fatalf("the Go client read %d bytes (%v) of the %d the Java client wrote, equal %v", len(got), err, len(data), bytes.Equal(got, data))
		}
		part := make([]byte, 100_000)
		r, err = cl.Open(ctx, c.Root()+"/big-up/big")
		if err != nil {
			t.Fatal(err)
		}
		n, err := r.ReadAt(part, 300_001) // an offset inside a packet and a chunk
		_ = r.Close()
		if err != nil || n != len(part) || !bytes.Equal(part, data[300_001:400_001]) {
			t.Fatalf("a read at an offset: %d bytes, %v, equal %v", n, err, bytes.Equal(part, data[300_001:400_001]))
		}
		w, err := cl.Create(ctx, c.Root()+"/big-from-go", 0o644)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(data); err != nil {
			t.Fatal(err)
		}
		if err := w.Close(); err != nil {
			t.Fatalf("write of 1 MiB: %v", err)
		}
		if out, err := c.DFS(t, "-cat", c.Root()+"/big-from-go"); err != nil || out != string(data) {
			t.Fatalf("the Java client reads %d bytes of the %d the Go client wrote (%v), equal %v", len(out), len(data), err, out == string(data))
		}
	})

	t.Run("permissions hold for another principal", func(t *testing.T) {
		k.Setenv(t)
		if _, err := c.DFS(t, "-chmod", "755", c.Root()); err != nil {
			t.Fatal(err)
		}
		mallory, err := dial(t, withKeytab(Other))
		if err != nil {
			t.Fatal(err)
		}
		if err := mallory.Remove(ctx, c.Root()+"/up/sst"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission") {
			t.Errorf("%s removed %s's file from a 755 directory: err = %v", Other, User, err)
		}
		if _, err := c.DFSAs(t, Other, "-rm", "-skipTrash", c.Root()+"/up/sst"); err == nil {
			t.Errorf("the Java client as %s removed %s's file", Other, User)
		}
	})

	failures := []struct {
		name  string
		setup func(t *testing.T) hdfsclient.Kerberos
		want  []string // each in the error
	}{
		{"keytab of another principal", func(t *testing.T) hdfsclient.Kerberos {
			return hdfsclient.Kerberos{Keytab: k.Keytab(Other), Principal: k.Principal(User)}
		}, []string{k.Keytab(Other), k.Principal(User), "--hdfs-keytab"}},
		{"principal unknown to the KDC", func(t *testing.T) hdfsclient.Kerberos {
			return hdfsclient.Kerberos{Keytab: k.Keytab(User), Principal: "nobody@" + k.Realm}
		}, []string{"nobody@" + k.Realm, "--hdfs-principal"}},
		{"principal without a realm", func(t *testing.T) hdfsclient.Kerberos {
			return hdfsclient.Kerberos{Keytab: k.Keytab(User), Principal: User}
		}, []string{"name@REALM"}},
		{"missing keytab", func(t *testing.T) hdfsclient.Kerberos {
			return hdfsclient.Kerberos{Keytab: filepath.Join(t.TempDir(), "absent.keytab"), Principal: k.Principal(User)}
		}, []string{"absent.keytab"}},
		{"no ticket cache", func(t *testing.T) hdfsclient.Kerberos {
			t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(t.TempDir(), "absent"))
			return hdfsclient.Kerberos{}
		}, []string{"absent", "kinit"}},
		{"garbage ticket cache", func(t *testing.T) hdfsclient.Kerberos {
			cc := filepath.Join(t.TempDir(), "krb5cc_garbage")
			if err := os.WriteFile(cc, []byte("not a ticket cache"), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("KRB5CCNAME", cc)
			return hdfsclient.Kerberos{}
		}, []string{"krb5cc_garbage", "kinit"}},
		{"simple authentication", func(t *testing.T) hdfsclient.Kerberos {
			t.Setenv("HADOOP_CONF_DIR", t.TempDir())
			t.Setenv("HADOOP_USER_NAME", User)
			return hdfsclient.Kerberos{}
		}, []string{"Kerberos", "hadoop.security.authentication"}},
	}
	for _, tc := range failures {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			k.Setenv(t)
			_, err := dial(t, tc.setup(t))
			if err == nil {
				t.Fatal("dial succeeded")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not name %q", err, w)
				}
			}
			t.Logf("refused: %v", err)
		})
	}
}
