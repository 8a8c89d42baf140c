package main

import (
	"context"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex/store/shared"
)

// TestRedteamFleetShowsOddPinKeys: pins of `_metadata` paths a store's user chose (a newline and a
// forged second line, bytes that are not UTF-8, an escape sequence) print in `ckguard fleet` as one
// quoted line each, never as a forged line or raw terminal control; --json keeps their exact bytes.
func TestRedteamFleetShowsOddPinKeys(t *testing.T) {
	root := t.TempDir()
	area, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"job\n  FORGED/chk-1/_metadata", "job-\xff/chk-1/_metadata", "job-\x1b[2J/chk-1/_metadata"}
	for _, k := range keys {
		if _, err := shared.NewPins(area, "hosta").Set(context.Background(), k, true, "op@hosta"); err != nil {
			t.Fatal(err)
		}
	}
	out, code := run(t, "fleet", "--store", root)
	if code != 0 {
		t.Fatalf("fleet: exit %d: %s", code, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "FORGED") {
			t.Errorf("a pin's key printed a forged line: %q", out)
		}
	}
	if strings.Contains(out, "\x1b") || strings.Contains(out, "\xff") {
		t.Errorf("raw control or invalid bytes in the text output: %q", out)
	}
	js, code := run(t, "fleet", "--store", root, "--json")
	if code != 0 {
		t.Fatalf("fleet --json: exit %d", code)
	}
	if !strings.Contains(js, "key_bytes") {
		t.Errorf("--json does not carry the exact bytes of a key that is not UTF-8: %s", js)
	}
}
