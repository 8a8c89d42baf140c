package localstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		dir := t.TempDir()
		st, err := localstore.New(dir)
		if err != nil {
			t.Fatal(err)
		}
		return storetest.Harness{
			Store:           st,
			ModTimeSettable: true,
			Unreadable: func(t *testing.T, key string) func() {
				return localstore.SetOpenDirHook(func(k string) error {
					if k == key {
						return syscall.EACCES
					}
					return nil
				})
			},
			Put: func(_ context.Context, key string, data []byte, mt time.Time) error {
				p := filepath.Join(dir, filepath.FromSlash(key))
				if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
					return err
				}
				if err := os.WriteFile(p, data, 0o644); err != nil {
					return err
				}
				if !mt.IsZero() {
					return os.Chtimes(p, mt, mt)
				}
				return nil
			},
		}
	})
}

func TestSymlinkNotFollowed(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "_metadata"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	st, _ := localstore.New(dir)
	n := 0
	_ = st.ListMetadata(context.Background(), func(oi store.ObjectInfo) error { n++; return nil })
	if n != 0 {
		t.Errorf("ListMetadata followed a symlink out of the store")
	}
}

// TestStatAnswersObserved: a decision's description of the key a caller observed (store.StatObserved)
// is what the caller saw (the local mount's stat through its folder descriptor); every other key is
// stat'ed on disk.
func TestStatAnswersObserved(t *testing.T) {
	dir := t.TempDir()
	for _, k := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(dir, k), []byte("on disk"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	seen := store.ObjectInfo{Path: "a", Size: 1234, ModTime: time.Unix(1_000_000, 0)}
	ctx := context.Background()
	got, err := store.StatObserved(ctx, st, seen)
	if err != nil || got != seen {
		t.Errorf("Stat(a) with a's observation = %+v, %v; want %+v", got, err, seen)
	}
	got, err = st.Stat(ctx, "b")
	if err != nil || got.Size != int64(len("on disk")) {
		t.Errorf("Stat(b) with a's observation = %+v, %v; want b as on disk", got, err)
	}
	if _, err := st.Stat(ctx, "missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Stat(missing) = %v, want not exist", err)
	}
}

// StoreTime creates a file to read the clock that stamps new files; it leaves nothing behind.
func TestStoreTimeLeavesNothing(t *testing.T) {
	dir := t.TempDir()
	s, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.StoreTime(context.Background()); err != nil {
		t.Fatal(err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the clock probe left %v in the store", ents)
	}
}

// The named probe (NFS has no O_TMPFILE) reads the same clock, replaces a probe file a killed process
// with this pid left, and removes its own.
func TestStoreTimeNamedProbe(t *testing.T) {
	dir := t.TempDir()
	s, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(dir, localstore.ProbeName())
	if err := os.WriteFile(stale, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC) // read back if the stale file were reused
	if err := os.Chtimes(stale, old, old); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	got, err := localstore.StoreTimeNamed(s)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if got.Before(before.Add(-time.Second)) || got.After(after) {
		t.Errorf("store time %s, this host's clock read %s … %s", got, before, after)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("the clock probe left %v in the store", ents)
	}
}

// TestOpenFollowsNoSymlink: the store's readers run as root for users who may write job folders, so
// a read never goes through a symlink, on the way or at the name, to a file outside the store or
// elsewhere in it; a real file is read as before.
func TestOpenFollowsNoSymlink(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("root only"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"job/chk-1", "other"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "job/chk-1/_metadata"), []byte("real"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "other/f"), []byte("other"), 0o644); err != nil {
		t.Fatal(err)
	}
	for link, target := range map[string]string{
		"job/out":         outside,
		"job/in":          "../other",
		"job/chk-1/alias": filepath.Join(outside, "secret"),
	} {
		if err := os.Symlink(target, filepath.Join(root, link)); err != nil {
			t.Fatal(err)
		}
	}
	st, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r, err := st.Open(ctx, "job/chk-1/_metadata")
	if err != nil {
		t.Fatalf("open a real file: %v", err)
	}
	r.Close()
	for _, k := range []string{"job/out/secret", "job/in/f", "job/chk-1/alias"} {
		if r, err := st.Open(ctx, k); err == nil {
			r.Close()
			t.Errorf("open %s through a symlink: succeeded", k)
		}
	}
	if _, err := st.Open(ctx, "job/chk-1/missing"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("open a missing file: %v, want not-exist", err)
	}
}

// TestStatFollowsNoSymlinkedFolder: a folder replaced by a symlink (to a folder outside the store, or to
// another one inside) makes the keys below it unreachable for Stat, as for Open and Walk; a final
// symlink is described itself; real folders are stat'ed as before.
func TestStatFollowsNoSymlinkedFolder(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	for _, p := range []string{filepath.Join(outside, "secret"), filepath.Join(dir, "job", "chk-1", "f")} {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("12345"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"out": outside, "job/alias": "chk-1", "job/flink": "chk-1/f"} {
		if err := os.Symlink(target, filepath.Join(dir, filepath.FromSlash(link))); err != nil {
			t.Fatal(err)
		}
	}
	st, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tc := range []struct {
		key     string
		want    string // "file", "dir", "special", "missing" or "error"
		wantLen int64
	}{
		{"job/chk-1/f", "file", 5},
		{"job/chk-1", "dir", 0},
		{"", "dir", 0},
		{"job/chk-1/nothing", "missing", 0},
		{"out", "special", 0},
		{"job/flink", "special", 0},
		{"out/secret", "error", 0},
		{"job/alias/f", "error", 0},
	} {
		oi, err := st.Stat(ctx, tc.key)
		got := "file"
		switch {
		case errors.Is(err, fs.ErrNotExist):
			got = "missing"
		case err != nil:
			got = "error"
		case oi.IsDir:
			got = "dir"
		case oi.Special:
			got = "special"
		}
		if got != tc.want || got == "file" && oi.Size != tc.wantLen {
			t.Errorf("Stat(%q) = %+v, %v: %s, want %s", tc.key, oi, err, got, tc.want)
		}
	}
}
