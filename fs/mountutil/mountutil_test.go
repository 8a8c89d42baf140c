package mountutil

import "testing"

func TestUnescape(t *testing.T) {
	for in, want := range map[string]string{`/a\040b`: "/a b", `/plain`: "/plain", `/t\011x\134y`: "/t\tx\\y", `/bad\09`: `/bad\09`} {
		if got := unescape(in); got != want {
			t.Errorf("unescape(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPrepareErrors(t *testing.T) {
	if _, err := Prepare("/nonexistent/ckguard-mnt"); err == nil {
		t.Fatal("missing mountpoint accepted")
	}
	// "/" is a mountpoint but not a FUSE one: allowed by Prepare (the kernel decides).
	if _, err := Prepare(t.TempDir()); err != nil {
		t.Fatalf("plain directory: %v", err)
	}
}
