package localstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// mkdirDeep makes levels nested folders of the given name length below dir through descriptors (the
// path passes PATH_MAX), writes file name into the deepest and returns its store key.
func mkdirDeep(t testing.TB, dir string, levels, nameLen int, file string) string {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	var key []string
	for i := 0; i < levels; i++ {
		name := strings.Repeat(string(rune('a'+i%26)), nameLen)
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		nfd, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = nfd
		key = append(key, name)
	}
	defer unix.Close(fd)
	if file != "" {
		ffd, err := unix.Openat(fd, file, unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Write(ffd, []byte("deep"))
		unix.Close(ffd)
		key = append(key, file)
	}
	return strings.Join(key, "/")
}

// TestWalkPastPathMax is the outage of issue 29: 18 folders of 250 bytes (a path of 4,518 bytes) made
// by any user used to fail every walk with "file name too long". Walk, ListMetadata, Stat and Open
// now reach every entry by descriptors.
func TestWalkPastPathMax(t *testing.T) {
	dir := t.TempDir()
	deep := mkdirDeep(t, dir, 18, 250, flinklayout.MetadataName)
	if len(dir)+len(deep) <= 4096 {
		t.Fatalf("path only %d bytes", len(dir)+len(deep))
	}
	if err := os.WriteFile(filepath.Join(dir, "other"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	seen := map[string]bool{}
	if err := st.Walk(ctx, "", func(oi store.ObjectInfo) error { seen[oi.Path] = true; return nil }); err != nil {
		t.Fatalf("Walk: %v", err)
	}
	if !seen[deep] || !seen["other"] || len(seen) != 18+2 {
		t.Errorf("Walk saw %d entries (deep file %v, other %v), want 20", len(seen), seen[deep], seen["other"])
	}
	var metas []string
	if err := st.ListMetadata(ctx, func(oi store.ObjectInfo) error { metas = append(metas, oi.Path); return nil }); err != nil {
		t.Fatalf("ListMetadata: %v", err)
	}
	if len(metas) != 1 || metas[0] != deep {
		t.Errorf("ListMetadata = %d keys, want the deep one", len(metas))
	}
	oi, err := st.Stat(ctx, deep)
	if err != nil || oi.Size != 4 || oi.IsDir {
		t.Errorf("Stat(deep) = %+v, %v", oi, err)
	}
	r, err := st.Open(ctx, deep)
	if err != nil {
		t.Fatalf("Open(deep): %v", err)
	}
	b := make([]byte, 4)
	if _, err := r.ReadAt(b, 0); err != nil || string(b) != "deep" {
		t.Errorf("read %q, %v", b, err)
	}
	r.Close()
	// A walk of a prefix past PATH_MAX too.
	pre := deep[:strings.LastIndexByte(deep, '/')]
	n := 0
	if err := st.Walk(ctx, pre[:strings.LastIndexByte(pre, '/')], func(store.ObjectInfo) error { n++; return nil }); err != nil || n != 2 {
		t.Errorf("Walk(deep prefix) = %d entries, %v; want 2", n, err)
	}
}

// openFds counts this process's open descriptors.
func openFds(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip(err)
	}
	return len(ents)
}

// TestWalkDeepTreeBoundedFds: a 1,200-level tree is walked with at most MaxOpenDirs+3 descriptors
// (the walk reopens folders deeper than that from the deepest open one) and no Go recursion.
func TestWalkDeepTreeBoundedFds(t *testing.T) {
	dir := t.TempDir()
	const levels = 1200
	deep := mkdirDeep(t, dir, levels, 3, flinklayout.MetadataName)
	// A side folder with a file at a level past the descriptor bound, to check the buffered folders.
	segs := strings.Split(deep, "/")
	side := strings.Join(segs[:200], "/") + "/side"
	if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(side)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, filepath.FromSlash(side), "f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	st, _ := localstore.New(dir)
	base := openFds(t)
	peak := 0
	n := 0
	err := st.Walk(context.Background(), "", func(oi store.ObjectInfo) error {
		n++
		if n%50 == 0 {
			peak = max(peak, openFds(t)-base)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := levels + 1 + 2; n != want {
		t.Errorf("Walk reported %d entries, want %d", n, want)
	}
	if peak > localstore.MaxOpenDirs+3 {
		t.Errorf("walk held %d descriptors, bound %d", peak, localstore.MaxOpenDirs+3)
	}
	if after := openFds(t); after != base {
		t.Errorf("walk left %d descriptors open", after-base)
	}
	if _, err := st.Stat(context.Background(), deep); err != nil {
		t.Errorf("Stat of a 1,200-level key: %v", err)
	}
	t.Logf("1,200 levels: %d entries, peak %d descriptors", n, peak)
}

// TestWalkSymlinkLoop: symlinks (a loop, one to its own folder, one out of the store) are reported as
// special entries, never followed: the walk ends and sees each once.
func TestWalkSymlinkLoop(t *testing.T) {
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "job", "d"), 0o755)
	os.Symlink("b", filepath.Join(dir, "job", "a"))
	os.Symlink("a", filepath.Join(dir, "job", "b"))
	os.Symlink("..", filepath.Join(dir, "job", "d", "up"))
	os.Symlink("/", filepath.Join(dir, "job", "root"))
	st, _ := localstore.New(dir)
	got := map[string]bool{}
	ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error {
		t.Errorf("unknown subtree %s: %v", u.Key, u.Err)
		return nil
	})
	err := st.Walk(ctx, "", func(oi store.ObjectInfo) error {
		if got[oi.Path] {
			t.Errorf("%s reported twice", oi.Path)
		}
		got[oi.Path] = true
		if strings.HasSuffix(oi.Path, "/a") && !oi.Special {
			t.Errorf("symlink %s not special: %+v", oi.Path, oi)
		}
		return nil
	})
	if err != nil || len(got) != 6 {
		t.Errorf("Walk = %d entries, %v; want 6", len(got), err)
	}
	if _, err := st.Stat(ctx, "job/a/x"); err == nil {
		t.Errorf("Stat through a symlink loop succeeded")
	}
}

// TestWalkOddNames: names with a newline, control bytes and invalid UTF-8 are walked, stat'ed and
// opened as they are.
func TestWalkOddNames(t *testing.T) {
	dir := t.TempDir()
	names := []string{"new\nline", "ctl\x01\x1b[31m", "bad\xff\xfeutf8", "tab\tand space"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(dir, n), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, n, flinklayout.MetadataName), []byte(n), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, _ := localstore.New(dir)
	got := map[string]bool{}
	if err := st.ListMetadata(context.Background(), func(oi store.ObjectInfo) error { got[oi.Path] = true; return nil }); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		k := n + "/" + flinklayout.MetadataName
		if !got[k] {
			t.Errorf("ListMetadata missed %q", k)
		}
		if oi, err := st.Stat(context.Background(), k); err != nil || oi.Size != int64(len(n)) {
			t.Errorf("Stat(%q) = %+v, %v", k, oi, err)
		}
	}
}

// TestWalkUnreadableFolder: a folder the walk cannot open (EACCES injected: the test runs as root, who
// reads any mode) is an unknown subtree. Without a WithUnknown callback the walk fails with an error
// wrapping *store.UnknownSubtree (the old contract); with one, it is reported once, with its owner,
// and the rest of the store is walked.
func TestWalkUnreadableFolder(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"a/chk-1/_metadata", "b/chk-2/_metadata", "b/chk-2/x/_metadata", "c/_metadata"} {
		p := filepath.Join(dir, filepath.FromSlash(k))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, nil, 0o644)
	}
	defer localstore.SetOpenDirHook(func(key string) error {
		if key == "b/chk-2" {
			return syscall.EACCES
		}
		return nil
	})()
	st, _ := localstore.New(dir)
	err := st.ListMetadata(context.Background(), func(store.ObjectInfo) error { return nil })
	var u *store.UnknownSubtree
	if !errors.As(err, &u) || u.Key != "b/chk-2" || !errors.Is(err, syscall.EACCES) {
		t.Fatalf("ListMetadata without a callback = %v, want an UnknownSubtree b/chk-2 wrapping EACCES", err)
	}
	var unknown []store.UnknownSubtree
	ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error { unknown = append(unknown, u); return nil })
	var got []string
	if err := st.ListMetadata(ctx, func(oi store.ObjectInfo) error { got = append(got, oi.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(unknown) != 1 || unknown[0].Key != "b/chk-2" || !unknown[0].HasUID || unknown[0].UID != uint32(os.Getuid()) {
		t.Errorf("ListMetadata = %v, unknown %+v; want a/chk-1 and c, unknown b/chk-2 with its owner", got, unknown)
	}
	if !strings.Contains(unknown[0].Err.Error(), "permission denied") {
		t.Errorf("cause %v", unknown[0].Err)
	}
	_ = runtime.GOOS
}
