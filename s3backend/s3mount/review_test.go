package s3mount_test

import (
	"context"
	"io"
	"os"
	"syscall"
	"testing"
)

// TestUploadDecidedAgain (review M4): a write handle opened on an existing object (allowed then) replaces
// it only at close; if a checkpoint came to reference the object meanwhile, the close is refused and the
// object stays as it was. A second upload of the same handle (after an fsync) replaces only its own
// content and is not decided again.
func TestUploadDecidedAgain(t *testing.T) {
	ck := newChecker()
	e := setup(t, ck, nil)
	e.put(t, "job/chk-3/state", "original")
	e.put(t, "job/chk-3/other", "original")

	f, err := os.OpenFile(e.path("job/chk-3/state"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("CHANGED!"), 0); err != nil {
		t.Fatal(err)
	}
	ck.mu.Lock()
	ck.protected["job/chk-3/state"] = true // a checkpoint indexed since the open references it
	ck.mu.Unlock()
	wantErrno(t, "close of a write handle on a now referenced object", f.Close(), syscall.EPERM)
	b := make([]byte, 64)
	m, err := e.c.ReadAt(context.Background(), "job/chk-3/state", b, 0, "")
	if err != nil && err != io.EOF {
		t.Fatal(err)
	}
	if string(b[:m]) != "original" {
		t.Errorf("referenced object replaced: %q", b[:m])
	}

	g, err := os.OpenFile(e.path("job/chk-3/other"), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.WriteAt([]byte("first"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Sync(); err != nil {
		t.Fatalf("first upload: %v", err)
	}
	ck.mu.Lock()
	ck.young = map[string]bool{"job/chk-3/other": true} // now in grace: it was just written
	ck.mu.Unlock()
	if _, err := g.WriteAt([]byte("second"), 0); err != nil {
		t.Fatal(err)
	}
	if err := g.Close(); err != nil {
		t.Errorf("second upload of the handle's own content: %v", err)
	}
}
