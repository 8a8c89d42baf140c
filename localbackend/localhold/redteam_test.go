package localhold

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRedteamOddKeysNeverFlagOutside: keys a `_metadata` any user of the store wrote can make
// protected: "..", a path through "..", a newline, ckguard's own quarantine folder. A pass flags the
// checkpoint's own file and nothing outside the store root or in ckguard's folders.
func TestRedteamOddKeysNeverFlagOutside(t *testing.T) {
	f := newFixture(t, "job/chk-1/f", "job/chk-1/a\nb", ".ckguard-quarantine/entry-1")
	outside := filepath.Join(filepath.Dir(f.root), "outside")
	if err := os.WriteFile(outside, []byte("not the store's"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if fd, err := unix.Open(outside, unix.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
			_, _ = setImmutable(fd, false)
			unix.Close(fd)
		}
	})
	h := f.holder()
	f.ix.prot = map[string]bool{"job/chk-1/f": true, "job/chk-1/a\nb": true, "../outside": true, "job/../../outside": true, ".ckguard-quarantine/entry-1": true}
	_ = h.Pass(context.Background()) // the odd keys fail or are left alone; the pass itself may say so
	f.want(map[string]bool{"job/chk-1/f": true, "job/chk-1/a\nb": true}, "job/chk-1/f", "job/chk-1/a\nb", ".ckguard-quarantine/entry-1")
	fl, err := os.Open(outside)
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()
	if on, err := Immutable(fl); err != nil || on {
		t.Errorf("a file outside the store root was flagged: %v %v", on, err)
	}
}
