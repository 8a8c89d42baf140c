package localquarantine

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// BenchmarkRemove compares what an allowed unlink costs the store without the quarantine (unlinkat)
// and with it (MoveAt: record appended to the journal, renameat2 into the folder), FUSE not included.
func BenchmarkRemove(b *testing.B) {
	for _, staged := range []bool{false, true} {
		b.Run(fmt.Sprintf("quarantine=%v", staged), func(b *testing.B) {
			dir := b.TempDir()
			l, err := OpenLocal(dir, nil)
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			sub := filepath.Join(dir, "job", "shared")
			if err := os.MkdirAll(sub, 0o755); err != nil {
				b.Fatal(err)
			}
			for i := range b.N {
				f, err := os.Create(filepath.Join(sub, fmt.Sprint(i)))
				if err != nil {
					b.Fatal(err)
				}
				f.Close()
			}
			pfd, err := unix.Open(sub, unix.O_PATH|unix.O_DIRECTORY, 0)
			if err != nil {
				b.Fatal(err)
			}
			defer unix.Close(pfd)
			b.ResetTimer()
			for i := range b.N {
				name := fmt.Sprint(i)
				if staged {
					_, err = l.MoveAt(pfd, name, "job/shared/"+name, quarantine.Decision{Op: "unlink", Reason: "allowed", Message: "unlink /job/shared/" + name + ": referenced by no live checkpoint"})
				} else {
					err = unix.Unlinkat(pfd, name, 0)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
