//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestKerberosGuardMount: a guard mount over a kerberized HDFS (KDC, Kerberos RPC, block tokens, SASL
// data transfer) logs in with a keytab (--hdfs-keytab/--hdfs-principal) and with a ticket cache
// (KRB5CCNAME), lists the store, refuses to unlink a file a live checkpoint references (EPERM, the
// file stays on HDFS) and deletes an unreferenced one (gone from HDFS); a credential the KDC rejects
// or a missing ticket cache stops the mount before it serves, with an error naming the fix.
func TestKerberosGuardMount(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{Kerberos: true, Protection: "privacy"})
	k := c.Kerberos()
	keytab := hdfscli.Options{Timeout: 20 * time.Second, Keytab: k.Keytab(minidfs.User), Principal: k.Principal(minidfs.User)}
	cases := []struct {
		name string
		// login sets the test's credentials and returns the mount's options.
		login func(t *testing.T) hdfscli.Options
	}{
		{"keytab", func(t *testing.T) hdfscli.Options { return keytab }},
		{"ticket cache", func(t *testing.T) hdfscli.Options {
			cc := filepath.Join(t.TempDir(), "krb5cc")
			k.Kinit(t, minidfs.User, cc)
			t.Setenv("KRB5CCNAME", "FILE:"+cc)
			return hdfscli.Options{Timeout: 20 * time.Second}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			k.Setenv(t)
			o := tc.login(t)
			storeDir := c.Root() + "/" + strings.ReplaceAll(tc.name, " ", "-")
			tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: c.URI(storeDir)})
			if err != nil {
				t.Fatal(err)
			}
			stray := tr.Purge + "/taskowned/stray-" + strings.Repeat("0", 8)
			if err := tr.Write(stray, 64, time.Now().Add(-30*24*time.Hour)); err != nil {
				t.Fatal(err)
			}
			c.Upload(t, tr.Root, storeDir)
			uri := c.URI(storeDir)

			mnt, stop := guardMount(t, t.TempDir(), guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy()}, o)
			defer stop()

			var referenced string
			for _, f := range tr.Survivors(tr.Purge, treegen.DefaultPolicy) {
				if strings.Contains(f, "/shared/") && slices.Contains(tr.Referenced(), f) {
					referenced = f
					break
				}
			}
			if referenced == "" {
				t.Fatal("the incident tree has no referenced shared file in the old job's folder")
			}
			if _, err := os.ReadDir(filepath.Join(mnt, tr.Purge, "shared")); err != nil {
				t.Fatalf("list through the mount: %v", err)
			}
			if err := os.Remove(filepath.Join(mnt, referenced)); !errors.Is(err, syscall.EPERM) {
				t.Errorf("unlink of the referenced %s through the mount: %v, want EPERM", referenced, err)
			}
			if err := os.Remove(filepath.Join(mnt, stray)); err != nil {
				t.Errorf("unlink of the unreferenced %s through the mount: %v", stray, err)
			}
			stop()

			files := hdfsFilesWith(t, uri, o)
			if !slices.Contains(files, referenced) {
				t.Errorf("the referenced %s is gone from HDFS", referenced)
			}
			if slices.Contains(files, stray) {
				t.Errorf("the unreferenced %s is still on HDFS", stray)
			}

			// rename2 on the library's Kerberos connection: the NameNode refuses an existing target.
			ctx := context.Background()
			cl, _, err := hdfscli.Dial(ctx, uri, o)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			for _, name := range []string{"/rename-a", "/rename-b"} {
				w, err := cl.Create(ctx, storeDir+name, 0o644)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := w.Write([]byte(name)); err != nil {
					t.Fatal(err)
				}
				if err := w.Close(); err != nil {
					t.Fatal(err)
				}
			}
			if err := cl.Rename(ctx, storeDir+"/rename-a", storeDir+"/rename-b"); !errors.Is(err, fs.ErrExist) {
				t.Errorf("rename onto an existing file with Kerberos: %v, want fs.ErrExist", err)
			}
			if fi, err := cl.Stat(ctx, storeDir+"/rename-b"); err != nil || fi.Size != int64(len("/rename-b")) {
				t.Errorf("the target after the refused rename: %+v, %v", fi, err)
			}
			if err := cl.Rename(ctx, storeDir+"/rename-a", storeDir+"/rename-c"); err != nil {
				t.Errorf("rename onto a free name with Kerberos: %v", err)
			}
		})
	}

	failures := []struct {
		name  string
		login func(t *testing.T) hdfscli.Options
		want  []string // all in the error
	}{
		{"keytab of another principal", func(t *testing.T) hdfscli.Options {
			o := keytab
			o.Keytab = k.Keytab(minidfs.Other)
			return o
		}, []string{k.Principal(minidfs.User), k.Keytab(minidfs.Other), "--hdfs-keytab"}},
		{"principal unknown to the KDC", func(t *testing.T) hdfscli.Options {
			o := keytab
			o.Principal = "nobody@" + k.Realm
			return o
		}, []string{"nobody@" + k.Realm, "--hdfs-principal"}},
		{"no ticket cache", func(t *testing.T) hdfscli.Options {
			t.Setenv("KRB5CCNAME", "FILE:"+filepath.Join(t.TempDir(), "absent"))
			return hdfscli.Options{Timeout: 20 * time.Second}
		}, []string{"absent", "kinit"}},
	}
	for _, tc := range failures {
		t.Run("refused/"+tc.name, func(t *testing.T) {
			k.Setenv(t)
			o := tc.login(t)
			dir := t.TempDir()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			served := false
			err := hdfsguardd.Run(ctx, guardd.Config{StoreDir: c.URI(c.Root()), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
				Policy: refindex.DefaultPolicy(), Ready: func(*guardd.Mounted) { served = true; cancel() }}, o)
			if served || err == nil {
				t.Fatalf("the mount served with a bad credential (err %v)", err)
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
