package localfs

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestStoreRoot covers storeRoot's resolution directly, with openat2 and with the pre-5.6 fallback: keys
// below the root work, the root itself works, and a symlink at the final name is never followed.
func TestStoreRoot(t *testing.T) {
	for _, fallback := range []bool{false, true} {
		t.Run("fallback="+strconv.FormatBool(fallback), func(t *testing.T) {
			dir := t.TempDir()
			outside := t.TempDir()
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(os.MkdirAll(filepath.Join(dir, "a/b"), 0o755))
			must(os.WriteFile(filepath.Join(dir, "a/b/f"), []byte("f"), 0o644))
			must(os.WriteFile(filepath.Join(outside, "v"), []byte("v"), 0o644))
			must(os.Symlink(filepath.Join(outside, "v"), filepath.Join(dir, "a/ln")))
			r, err := openStoreRoot(dir)
			must(err)
			defer r.close()
			r.noOpenat2.Store(fallback)

			fd, err := r.open("a/b/f", unix.O_RDONLY, 0)
			must(err)
			unix.Close(fd)
			fd, err = r.open("", unix.O_RDONLY|unix.O_DIRECTORY, 0)
			must(err)
			unix.Close(fd)
			if _, err := r.open("a/ln", unix.O_WRONLY|unix.O_TRUNC, 0); !errors.Is(err, unix.ELOOP) {
				t.Errorf("open of a final symlink: %v, want ELOOP", err)
			}
			var st syscall.Stat_t
			must(r.lstat("a/ln", &st))
			if st.Mode&syscall.S_IFMT != syscall.S_IFLNK {
				t.Errorf("lstat followed the symlink: mode %o", st.Mode)
			}
			must(r.rename("a/b/f", "g", 0))
			must(r.rename("g", "a/g", unix.RENAME_NOREPLACE))
			must(r.rename("a/g", "a/h", 0)) // within one folder: one descriptor
			must(r.rename("a/h", "top", 0))
			must(r.rename("top", "top2", unix.RENAME_NOREPLACE)) // within the root
			if _, err := os.Stat(filepath.Join(dir, "top2")); err != nil {
				t.Errorf("renames within the root: %v", err)
			}
			must(r.remove("top2", 0))
			must(r.remove("a/ln", 0))
			must(r.remove("a/b", unix.AT_REMOVEDIR))
			if b, err := os.ReadFile(filepath.Join(outside, "v")); err != nil || string(b) != "v" {
				t.Errorf("outside file: %q %v", b, err)
			}
			if ents, _ := os.ReadDir(filepath.Join(dir, "a")); len(ents) != 0 {
				t.Errorf("left in a/: %v", ents)
			}
		})
	}
}

// BenchmarkStoreRootRemove is the daemon's own work per unlink (the part issue 4's rm -rf target pays on
// top of go-fuse's loopback): open the parent beneath the root, unlinkat, close.
func BenchmarkStoreRootRemove(b *testing.B) {
	dir := b.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "job/shared/d000"), 0o755); err != nil {
		b.Fatal(err)
	}
	r, err := openStoreRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer r.close()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		k := "job/shared/d000/f" + strconv.Itoa(i)
		fd, err := unix.Open(filepath.Join(dir, k), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		if err != nil {
			b.Fatal(err)
		}
		unix.Close(fd)
		b.StartTimer()
		if err := r.remove(k, 0); err != nil {
			b.Fatal(err)
		}
	}
}
