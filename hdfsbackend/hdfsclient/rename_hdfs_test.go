//go:build hdfs

package hdfsclient_test

import (
	"context"
	"errors"
	"io"
	"io/fs"
	"path"
	"sync"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

func readFile(cl hdfsclient.FS, p string) (string, error) {
	r, err := cl.Open(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer r.Close()
	b := make([]byte, r.Size())
	if _, err := r.ReadAt(b, 0); err != nil && err != io.EOF {
		return "", err
	}
	return string(b), nil
}

// TestRenameRefusedByNameNode: Rename sends rename2 without overwrite and the NameNode itself refuses
// an existing target (no look at the target beforehand: Rename2 sends nothing else), leaving both
// files; the same call with overwrite replaces, so the refusal is the flag's. Renames onto free names,
// of directories, and the other failures keep their errno.
func TestRenameRefusedByNameNode(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	r := c.Root()
	wantFiles := func(t *testing.T, files map[string]string) {
		t.Helper()
		for p, want := range files {
			if got, err := readFile(cl, r+p); err != nil || got != want {
				t.Errorf("%s = %q, %v; want %q", p, got, err, want)
			}
		}
	}
	minidfs.WriteFile(t, cl, r+"/a", "A")
	minidfs.WriteFile(t, cl, r+"/b", "B")
	minidfs.WriteFile(t, cl, r+"/d/x", "X")
	if err := cl.Mkdir(ctx, r+"/empty", 0o755); err != nil {
		t.Fatal(err)
	}

	if err := hdfsclient.Rename2(cl, r+"/a", r+"/b", false); !errors.Is(err, fs.ErrExist) {
		t.Errorf("rename2 without overwrite onto an existing file: %v; want fs.ErrExist", err)
	}
	wantFiles(t, map[string]string{"/a": "A", "/b": "B"})
	for _, to := range []string{"/b", "/empty", "/d", "/a"} {
		err := cl.Rename(ctx, r+"/a", r+to)
		if !errors.Is(err, fs.ErrExist) || hdfsclient.Errno(err) != syscall.EEXIST {
			t.Errorf("Rename onto %s: %v (errno %v); want EEXIST", to, err, hdfsclient.Errno(err))
		}
	}
	wantFiles(t, map[string]string{"/a": "A", "/b": "B", "/d/x": "X"})
	if fi, err := cl.Stat(ctx, r+"/empty"); err != nil || !fi.IsDir {
		t.Errorf("empty directory after the refused rename: %+v, %v", fi, err)
	}

	for _, tc := range []struct {
		name, from, to string
		want           syscall.Errno
	}{
		{"missing source", "/nope", "/z", syscall.ENOENT},
		{"missing target parent", "/a", "/no/dir/a", syscall.ENOENT},
		{"target parent is a file", "/a", "/b/a", syscall.ENOTDIR},
	} {
		if err := cl.Rename(ctx, r+tc.from, r+tc.to); hdfsclient.Errno(err) != tc.want {
			t.Errorf("%s: Rename %s → %s: %v (errno %v); want %v", tc.name, tc.from, tc.to, err, hdfsclient.Errno(err), tc.want)
		}
	}

	if err := cl.Rename(ctx, r+"/a", r+"/c"); err != nil {
		t.Fatalf("rename onto a free name: %v", err)
	}
	if err := cl.Rename(ctx, r+"/d", r+"/d2"); err != nil {
		t.Fatalf("rename of a directory: %v", err)
	}
	wantFiles(t, map[string]string{"/c": "A", "/d2/x": "X", "/b": "B"})
	if _, err := cl.Stat(ctx, r+"/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("a after its rename: %v", err)
	}

	// The library's rename (overwriteDest=true) replaces the target: what Rename no longer sends.
	if err := hdfsclient.Rename2(cl, r+"/c", r+"/b", true); err != nil {
		t.Fatalf("rename2 with overwrite: %v", err)
	}
	wantFiles(t, map[string]string{"/b": "A"})
}

// TestConcurrentRenamesOntoOneName: sources renamed onto one free name at the same time: exactly one
// arrives, every other fails with EEXIST and keeps its content (a look at the target before an
// overwriting rename lets several through, each replacing the previous).
func TestConcurrentRenamesOntoOneName(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	r := c.Root()
	const n = 8
	for i := range n {
		minidfs.WriteFile(t, cl, path.Join(r, "src", string(rune('a'+i))), string(rune('A'+i)))
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i := range n {
		wg.Go(func() {
			<-start
			errs[i] = cl.Rename(ctx, path.Join(r, "src", string(rune('a'+i))), r+"/dst")
		})
	}
	close(start)
	wg.Wait()
	won := -1
	for i, err := range errs {
		switch {
		case err == nil && won >= 0:
			t.Errorf("renames %d and %d both arrived at dst", won, i)
		case err == nil:
			won = i
		case !errors.Is(err, fs.ErrExist):
			t.Errorf("rename %d: %v; want EEXIST", i, err)
		default:
			if got, err := readFile(cl, path.Join(r, "src", string(rune('a'+i)))); err != nil || got != string(rune('A'+i)) {
				t.Errorf("source %d after its refused rename: %q, %v", i, got, err)
			}
		}
	}
	if won < 0 {
		t.Fatal("no rename arrived")
	}
	if got, err := readFile(cl, r+"/dst"); err != nil || got != string(rune('A'+won)) {
		t.Errorf("dst = %q, %v; want the winner's %q", got, err, string(rune('A'+won)))
	}
}

// TestRemoveOnHDFS: Remove is one non-recursive delete at the NameNode: a file and an empty directory
// go, a non-empty directory is ENOTEMPTY with its files intact, a missing path is ENOENT (also the
// second remove of the same file), never success.
func TestRemoveOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	cl, _ := c.DialSuperuser(t, c.Root())
	r := c.Root()
	minidfs.WriteFile(t, cl, r+"/f", "F")
	minidfs.WriteFile(t, cl, r+"/d/x", "X")
	if err := cl.Mkdir(ctx, r+"/empty", 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/f", "/empty"} {
		if err := cl.Remove(ctx, r+p); err != nil {
			t.Errorf("remove %s: %v", p, err)
		}
		if _, err := cl.Stat(ctx, r+p); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after its remove: %v", p, err)
		}
	}
	if err := cl.Remove(ctx, r+"/d"); hdfsclient.Errno(err) != syscall.ENOTEMPTY {
		t.Errorf("remove of a non-empty directory: %v (errno %v), want ENOTEMPTY", err, hdfsclient.Errno(err))
	}
	if got, err := readFile(cl, r+"/d/x"); err != nil || got != "X" {
		t.Errorf("d/x after the refused remove: %q %v", got, err)
	}
	for _, p := range []string{"/f", "/nope"} {
		if err := cl.Remove(ctx, r+p); hdfsclient.Errno(err) != syscall.ENOENT {
			t.Errorf("remove of the missing %s: %v (errno %v), want ENOENT", p, err, hdfsclient.Errno(err))
		}
	}
}
