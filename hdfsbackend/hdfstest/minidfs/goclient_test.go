//go:build hdfs

package minidfs

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// TestHDFSGoClient: the Go HDFS client reaches the cluster's NameNode and its DataNode (data transfer
// to 127.0.0.1), sees the mtimes Upload kept, and is refused by the cluster's permission checks as
// another user; what the HDFS store and mount tests build on.
func TestHDFSGoClient(t *testing.T) {
	c := Start(t, Options{})
	ctx := context.Background()
	dial := func(t *testing.T, user string) *hdfsclient.Client {
		t.Helper()
		t.Setenv("HADOOP_USER_NAME", user)
		t.Setenv("HADOOP_CONF_DIR", t.TempDir())
		cfg, err := hdfsclient.ConfigFromEnv(c.URI(c.Root()), hdfsclient.Kerberos{})
		if err != nil {
			t.Fatal(err)
		}
		cl, err := hdfsclient.Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("dial %s as %s: %v", c.URI(""), user, err)
		}
		t.Cleanup(func() { _ = cl.Close() })
		return cl
	}
	super := dial(t, currentUser())

	local := t.TempDir()
	old := time.Date(2021, 6, 1, 0, 0, 0, 0, time.UTC)
	if err := os.MkdirAll(filepath.Join(local, "job", "shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(local, "job", "shared", "sst"), []byte("uploaded by the Java client"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = filepath.WalkDir(local, func(p string, _ os.DirEntry, _ error) error { return os.Chtimes(p, old, old) })
	c.Upload(t, local, c.Root()+"/up")

	fi, err := super.Stat(ctx, c.Root()+"/up/job/shared/sst")
	if err != nil {
		t.Fatal(err)
	}
	if !fi.ModTime.Equal(old) || fi.Size != int64(len("uploaded by the Java client")) {
		t.Errorf("Go client sees %v, %d bytes; want %v, %d", fi.ModTime, fi.Size, old, len("uploaded by the Java client"))
	}
	r, err := super.Open(ctx, c.Root()+"/up/job/shared/sst")
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
	_ = r.Close()
	if err != nil || string(b) != "uploaded by the Java client" {
		t.Fatalf("read through the DataNode: %q, %v", b, err)
	}

	w, err := super.Create(ctx, c.Root()+"/from-go", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte("written by the Go client")); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if out, err := c.DFS(t, "-cat", c.Root()+"/from-go"); err != nil || out != "written by the Go client" {
		t.Fatalf("the Java client reads %q, %v", out, err)
	}

	if _, err := c.DFS(t, "-chmod", "755", c.Root()); err != nil {
		t.Fatal(err)
	}
	mallory := dial(t, "mallory")
	if err := mallory.Remove(ctx, c.Root()+"/from-go"); err == nil || !strings.Contains(strings.ToLower(err.Error()), "permission") {
		t.Errorf("mallory removed the superuser's file from a 755 directory: err = %v", err)
	}
	if err := super.Remove(ctx, c.Root()+"/from-go"); err != nil {
		t.Errorf("the superuser: %v", err)
	}
}

func currentUser() string {
	if u := os.Getenv("USER"); u != "" {
		return u
	}
	return "root"
}
