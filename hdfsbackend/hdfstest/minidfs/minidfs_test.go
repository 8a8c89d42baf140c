//go:build hdfs

package minidfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The harness against a real MiniDFSCluster: what the HDFS store and mount tests rely on.
func TestHDFSShared(t *testing.T) {
	c := Start(t, Options{})
	if !strings.HasPrefix(c.URI("/x"), "hdfs://127.0.0.1:") || !strings.HasSuffix(c.URI("/x"), "/x") {
		t.Fatalf("URI = %q", c.URI("/x"))
	}

	t.Run("upload keeps mtimes", func(t *testing.T) {
		local := t.TempDir()
		old := time.Date(2020, 1, 2, 3, 4, 0, 0, time.UTC)
		files := map[string]string{"job/chk-1/_metadata": "m", "job/shared/sst-1": "s", "job/taskowned/x y": "spaces"}
		for p, body := range files {
			full := filepath.Join(local, p)
			if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(full, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		_ = filepath.WalkDir(local, func(p string, _ os.DirEntry, _ error) error { return os.Chtimes(p, old, old) })
		dst := c.Root() + "/up"
		c.Upload(t, local, dst)
		// -stat %Y: mtime in ms since the epoch, one line per path.
		for p, body := range files {
			got, err := c.DFS(t, "-stat", "%Y", dst+"/"+p)
			if err != nil {
				t.Fatal(err)
			}
			if strings.TrimSpace(got) != "1577934240000" {
				t.Errorf("%s: mtime %s, want %d", p, got, old.UnixMilli())
			}
			cat, err := c.DFS(t, "-cat", dst+"/"+p)
			if err != nil || cat != body {
				t.Errorf("%s: content %q (%v), want %q", p, cat, err, body)
			}
		}
		for _, d := range []string{"job", "job/chk-1", "job/shared"} {
			got, _ := c.DFS(t, "-stat", "%Y", dst+"/"+d)
			if strings.TrimSpace(got) != "1577934240000" {
				t.Errorf("directory %s: mtime %s, want %d", d, got, old.UnixMilli())
			}
		}
	})

	t.Run("settimes", func(t *testing.T) {
		p := c.Root() + "/f"
		if _, err := c.DFS(t, "-touchz", p); err != nil {
			t.Fatal(err)
		}
		when := time.Now().Add(-10 * 24 * time.Hour).Truncate(time.Millisecond)
		c.SetTimes(t, p, when)
		got, _ := c.DFS(t, "-stat", "%Y", p)
		if strings.TrimSpace(got) != strconv.FormatInt(when.UnixMilli(), 10) {
			t.Errorf("mtime %s, want %d", got, when.UnixMilli())
		}
	})

	t.Run("dfs errors", func(t *testing.T) {
		tests := []struct {
			name string
			args []string
			want string
		}{
			{"missing file", []string{"-cat", c.Root() + "/nope"}, "No such file"},
			{"unknown command", []string{"-frobnicate"}, "Unknown command"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				_, err := c.DFS(t, tt.args...)
				var de *DFSError
				if !errors.As(err, &de) || de.Exit == 0 || !strings.Contains(err.Error(), tt.want) {
					t.Fatalf("err = %v, want a DFSError naming %q", err, tt.want)
				}
			})
		}
		if _, err := c.DFS(t, "-ls", "a\tb"); err == nil || !strings.Contains(err.Error(), "TAB") {
			t.Errorf("an argument with a TAB: err = %v", err)
		}
	})

	t.Run("permissions are enforced", func(t *testing.T) {
		p := c.Root() + "/private"
		if _, err := c.DFS(t, "-mkdir", p); err != nil {
			t.Fatal(err)
		}
		if _, err := c.DFS(t, "-chmod", "700", p); err != nil {
			t.Fatal(err)
		}
		_, err := c.DFSAs(t, "mallory", "-touchz", p+"/x")
		if err == nil || !strings.Contains(err.Error(), "Permission denied") {
			t.Fatalf("mallory wrote into a 700 directory of the superuser: err = %v", err)
		}
		if _, err := c.DFS(t, "-touchz", p+"/x"); err != nil {
			t.Fatalf("the superuser: %v", err)
		}
	})

	t.Run("tests share one cluster, each in its own directory", func(t *testing.T) {
		d := Start(t, Options{})
		if d.Addr() != c.Addr() || d.Root() == c.Root() {
			t.Fatalf("second Start: %s %s, first %s %s", d.Addr(), d.Root(), c.Addr(), c.Root())
		}
		if out, err := d.DFS(t, "-ls", d.Root()); err != nil || out != "" {
			t.Fatalf("the new test's directory is not empty: %q %v", out, err)
		}
		d.Stop()
		if _, err := c.DFS(t, "-test", "-e", d.Root()); err == nil {
			t.Errorf("Stop left the test's directory %s", d.Root())
		}
	})
}

func TestHDFSTrash(t *testing.T) {
	c := Start(t, Options{TrashInterval: time.Hour})
	p := c.Root() + "/old"
	if _, err := c.DFS(t, "-touchz", p); err != nil {
		t.Fatal(err)
	}
	// Hadoop logs the move (not printed: the launcher has no log binding); the trash folder shows it.
	if _, err := c.DFS(t, "-rm", p); err != nil {
		t.Fatal(err)
	}
	if _, err := c.DFS(t, "-test", "-e", p); err == nil {
		t.Errorf("%s still there after -rm", p)
	}
	user := os.Getenv("USER")
	if user == "" {
		user = "root"
	}
	if _, err := c.DFS(t, "-test", "-e", "/user/"+user+"/.Trash/Current"+p); err != nil {
		t.Errorf("%s is not in the trash: %v", p, err)
	}
}

func TestHDFSNameNodeFaults(t *testing.T) {
	c := Start(t, Options{Exclusive: true})
	p := c.Root() + "/f"
	if _, err := c.DFS(t, "-touchz", p); err != nil {
		t.Fatal(err)
	}

	c.SafeMode(t, true)
	if _, err := c.DFS(t, "-rm", "-skipTrash", p); err == nil || !strings.Contains(err.Error(), "safe mode") {
		t.Fatalf("delete in safe mode: err = %v", err)
	}
	c.SafeMode(t, false)

	addr := c.Addr()
	c.StopNameNode(t)
	if _, err := c.DFS(t, "-ls", c.Root()); err == nil {
		t.Fatal("listing with the NameNode stopped succeeded")
	}
	c.RestartNameNode(t)
	if c.Addr() != addr {
		t.Fatalf("NameNode moved from %s to %s", addr, c.Addr())
	}
	if _, err := c.DFS(t, "-test", "-e", p); err != nil {
		t.Fatalf("%s lost across the NameNode restart: %v", p, err)
	}
	if _, err := c.DFS(t, "-rm", "-skipTrash", p); err != nil {
		t.Fatalf("delete after the restart: %v", err)
	}
}
