package localfs

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestWriteFdAfterReferenced pins what happens to a descriptor opened for writing while its file was not
// referenced, once a checkpoint references the file: its writes go on (with FUSE passthrough the kernel
// writes to the store's file directly, and nothing can take a backing file back from an open descriptor;
// docs/SEMANTICS.md says so), but everything else that would destroy the file is decided again and refused:
// ftruncate and hole punching through that same descriptor, a new open for writing, unlink, rename.
func TestWriteFdAfterReferenced(t *testing.T) {
	e := mountFake(t)
	if err := os.MkdirAll(filepath.Join(e.store, "job/shared"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(e.mnt, "job/shared/late.sst")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write([]byte("before")); err != nil {
		t.Fatal(err)
	}
	e.checker.Protect("job/shared/late.sst", "job/chk-9/_metadata")

	if _, err := f.Write([]byte(" after")); err != nil {
		t.Errorf("write through a descriptor opened before the file became referenced: %v (docs/SEMANTICS.md says it goes on)", err)
	}
	refused := []struct {
		name string
		do   func() error
	}{
		{"ftruncate through the same descriptor", func() error { return f.Truncate(0) }},
		{"punching a hole through the same descriptor", func() error {
			return syscall.Fallocate(int(f.Fd()), 0x02|0x01, 0, 4) // FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE
		}},
		{"a new open for writing", func() error {
			g, err := os.OpenFile(p, os.O_WRONLY, 0)
			if err == nil {
				g.Close()
			}
			return err
		}},
		{"unlink", func() error { return os.Remove(p) }},
		{"rename", func() error { return os.Rename(p, p+".moved") }},
	}
	for _, r := range refused {
		if err := r.do(); !errors.Is(err, syscall.EPERM) {
			t.Errorf("%s once the file is referenced: %v, want EPERM", r.name, err)
		}
	}
	if b, err := os.ReadFile(filepath.Join(e.store, "job/shared/late.sst")); err != nil || string(b) != "before after" {
		t.Errorf("the referenced file: %q %v", b, err)
	}
}
