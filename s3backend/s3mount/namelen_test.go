package s3mount_test

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
)

// TestNameLength: a name of 255 bytes (NAME_MAX) is made and read back; a longer one is refused with
// ENAMETOOLONG on every call that makes a name (create, mkdir, the target of a rename), as on a local
// file system, never sent to the server (which may fail on it with an internal error, EIO), and statfs
// says so. Nothing of the refused names reaches the bucket.
func TestNameLength(t *testing.T) {
	e := setup(t, newChecker(), nil)
	long, tooLong := strings.Repeat("a", 255), strings.Repeat("b", 256)
	if err := os.WriteFile(e.path(long), []byte("x"), 0o644); err != nil {
		t.Fatalf("create a 255-byte name: %v", err)
	}
	if b, err := os.ReadFile(e.path(long)); err != nil || string(b) != "x" {
		t.Fatalf("read the 255-byte name back: %q, %v", b, err)
	}
	if err := os.Mkdir(e.path("d"+long[1:]), 0o755); err != nil {
		t.Fatalf("mkdir a 255-byte name: %v", err)
	}
	e.put(t, "src", "s")
	for _, tc := range []struct {
		what string
		do   func() error
	}{
		{"create", func() error { return os.WriteFile(e.path(tooLong), []byte("x"), 0o644) }},
		{"create exclusive", func() error {
			f, err := os.OpenFile(e.path(tooLong), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
			if err == nil {
				f.Close()
			}
			return err
		}},
		{"mkdir", func() error { return os.Mkdir(e.path(tooLong), 0o755) }},
		{"rename onto", func() error { return os.Rename(e.path("src"), e.path(tooLong)) }},
	} {
		wantErrno(t, tc.what+" of a 256-byte name", tc.do(), syscall.ENAMETOOLONG)
	}
	if !e.exists(t, "src") {
		t.Error("the refused rename took the source away")
	}
	for _, k := range []string{tooLong, tooLong + "/"} {
		// versitygw answers a HEAD of such a key with 400; any answer but the object will do.
		if _, err := e.c.Head(context.Background(), k); err == nil {
			t.Errorf("%s reached the bucket", k)
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	if st.Namelen != 255 {
		t.Errorf("statfs name length %d, want 255", st.Namelen)
	}
}
