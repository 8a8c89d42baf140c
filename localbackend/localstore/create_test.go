package localstore_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
)

// TestCreateExclusive: the bytes and the time land at the key; an existing file is never replaced; a
// folder swapped for a symlink out of the store does not make the write land outside.
func TestCreateExclusive(t *testing.T) {
	mtime := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, root, outside string)
		key     string
		wantErr error // nil: created
	}{
		{"new folder", func(*testing.T, string, string) {}, "job/chk-3/_metadata", nil},
		{"existing file", func(t *testing.T, root, _ string) {
			mkfile(t, filepath.Join(root, "job/chk-3/_metadata"), "theirs")
		}, "job/chk-3/_metadata", fs.ErrExist},
		{"symlinked folder", func(t *testing.T, root, outside string) {
			if err := os.MkdirAll(filepath.Join(root, "job"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(outside, filepath.Join(root, "job", "chk-3")); err != nil {
				t.Fatal(err)
			}
		}, "job/chk-3/_metadata", errAny},
		// A symlink pointing inside the store is refused too: following it would put one job's
		// _metadata into another job's folder (a fake newest checkpoint there).
		{"symlinked folder inside the store", func(t *testing.T, root, _ string) {
			if err := os.MkdirAll(filepath.Join(root, "other", "chk-9"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.MkdirAll(filepath.Join(root, "job"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("../other/chk-9", filepath.Join(root, "job", "chk-3")); err != nil {
				t.Fatal(err)
			}
		}, "job/chk-3/_metadata", errAny},
		{"symlinked job folder inside the store", func(t *testing.T, root, _ string) {
			if err := os.MkdirAll(filepath.Join(root, "other", "chk-3"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink("other", filepath.Join(root, "job")); err != nil {
				t.Fatal(err)
			}
		}, "job/chk-3/_metadata", errAny},
		{"symlink at the name", func(t *testing.T, root, outside string) {
			if err := os.MkdirAll(filepath.Join(root, "job", "chk-3"), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(outside, "x"), filepath.Join(root, "job", "chk-3", "_metadata")); err != nil {
				t.Fatal(err)
			}
		}, "job/chk-3/_metadata", fs.ErrExist},
		{"climbing key", func(*testing.T, string, string) {}, "../x/_metadata", errAny},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root, outside := t.TempDir(), t.TempDir()
			tc.prepare(t, root, outside)
			st, err := localstore.New(root)
			if err != nil {
				t.Fatal(err)
			}
			err = st.CreateExclusive(context.Background(), tc.key, []byte("ours"), mtime, nil)
			if ents, _ := os.ReadDir(outside); len(ents) != 0 {
				t.Fatalf("wrote outside the store: %v", ents)
			}
			if _, err := os.Lstat(filepath.Join(root, "other", "chk-9", "_metadata")); err == nil {
				t.Fatal("followed a symlink inside the store: other/chk-9/_metadata written")
			}
			if _, err := os.Lstat(filepath.Join(root, "other", "chk-3", "_metadata")); err == nil {
				t.Fatal("followed a symlink inside the store: other/chk-3/_metadata written")
			}
			switch {
			case tc.wantErr == nil:
				if err != nil {
					t.Fatal(err)
				}
				p := filepath.Join(root, filepath.FromSlash(tc.key))
				b, _ := os.ReadFile(p)
				fi, _ := os.Stat(p)
				if string(b) != "ours" || fi == nil || !fi.ModTime().Equal(mtime) {
					t.Fatalf("created %q at %v", b, fi.ModTime())
				}
			case tc.wantErr == errAny:
				if err == nil {
					t.Fatal("no error")
				}
			default:
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err %v, want %v", err, tc.wantErr)
				}
				if fi, _ := os.Lstat(filepath.Join(root, filepath.FromSlash(tc.key))); fi != nil && fi.Mode()&fs.ModeSymlink != 0 {
					break
				}
				if b, _ := os.ReadFile(filepath.Join(root, filepath.FromSlash(tc.key))); string(b) != "theirs" {
					t.Fatalf("replaced: %q", b)
				}
			}
			// No temporary file is left behind.
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.Type().IsRegular() && filepath.Base(p) != "_metadata" {
					t.Errorf("left %s", p)
				}
				return nil
			})
		})
	}
}

var errAny = errors.New("any error")

func mkfile(t *testing.T, p, s string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
}
