package loopfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExt4: the filesystem is a real ext4 of the size asked, it fills up (ENOSPC), and it is gone
// (unmounted) once the test that made it ends.
func TestExt4(t *testing.T) {
	var mnt string
	t.Run("mounted", func(t *testing.T) {
		mnt = Ext4(t, Options{Size: 16 << 20, Prefix: "ckguard-ext4-loopfs-"})
		var st unix.Statfs_t
		if err := unix.Statfs(mnt, &st); err != nil {
			t.Fatal(err)
		}
		if st.Type != unix.EXT4_SUPER_MAGIC {
			t.Fatalf("%s: filesystem type %#x, want ext4", mnt, st.Type)
		}
		if size := int64(st.Blocks) * st.Bsize; size > 16<<20 || size < 8<<20 {
			t.Fatalf("%s: %d bytes, want about 16 MiB", mnt, size)
		}
		f, err := os.Create(filepath.Join(mnt, "fill"))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		buf := make([]byte, 1<<20)
		for i := 0; ; i++ {
			if _, err = f.Write(buf); err != nil {
				break
			}
			if i > 32 {
				t.Fatal("wrote 32 MiB into a 16 MiB filesystem")
			}
		}
		if err != unix.ENOSPC && !os.IsExist(err) {
			if pe, ok := err.(*os.PathError); !ok || pe.Err != unix.ENOSPC {
				t.Fatalf("filling the filesystem: %v, want ENOSPC", err)
			}
		}
	})
	if mnt == "" {
		return // skipped
	}
	var st, parent unix.Stat_t
	if err := unix.Stat(mnt, &st); err == nil {
		if err := unix.Stat(filepath.Dir(mnt), &parent); err == nil && st.Dev != parent.Dev {
			t.Fatalf("%s is still mounted after its test ended", mnt)
		}
	}
}
