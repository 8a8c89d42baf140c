package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// TestTextOutputQuotesUserNames: names the store's users chose print as one quoted field when they hold
// a control character or are not UTF-8, so a newline cannot forge a second line (a referenced file
// listed as an orphan, a fake verify line) and an escape sequence never reaches the terminal; ordinary
// names, spaces and non-ASCII letters included, print as they are.
func TestTextOutputQuotesUserNames(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"job/shared/a.sst", "job/shared/a.sst"},
		{"job/with space/é", "job/with space/é"},
		{"job/x\njob/shared/ref.sst", `"job/x\njob/shared/ref.sst"`},
		{"job/\x1b[2Jclear", `"job/\x1b[2Jclear"`},
		{"job/tab\tx", `"job/tab\tx"`},
		{"job/bad\xffname", `"job/bad\xffname"`},
		{"job/c1\u0085x", `"job/c1\u0085x"`},
	} {
		if got := shown(tc.in); got != tc.want {
			t.Errorf("shown(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	forged := "job/x\njob/shared/referenced.sst"
	var out bytes.Buffer
	printOrphans(&out, &refindex.OrphansResult{Files: []refindex.OrphanFile{{Path: forged, Size: 1}, {Path: "job/\x1b]0;owned\x07", Size: 1}}, Bytes: 2})
	for _, line := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "job/shared/referenced.sst") {
			t.Errorf("orphans printed the forged path on a line of its own:\n%s", out.String())
		}
	}
	if strings.ContainsAny(out.String(), "\x1b\x07") {
		t.Errorf("orphans printed an escape sequence raw: %q", out.String())
	}
	out.Reset()
	printVerify(&out, &refindex.VerifyResult{Broken: []refindex.BrokenCheckpoint{{Metadata: "job/chk-1/_metadata", Missing: []string{"job/a\nverify OK: forged"}, MissingCount: 1}}})
	if strings.Contains(out.String(), "\nverify OK: forged") {
		t.Errorf("verify printed a forged line:\n%s", out.String())
	}
}

// TestQuarantineListShowsStagedBytes: `quarantine list` shows the key of an entry whose name is not
// UTF-8 as its bytes (quoted), not as the replacement characters its JSON path field carries, and a
// name with a newline as one quoted field.
func TestQuarantineListShowsStagedBytes(t *testing.T) {
	store := t.TempDir()
	names := []string{"job/bad\xffname", "job/nl\nname"}
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(store, "job"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(store, n), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	area, err := localquarantine.OpenLocal(store, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if _, err := area.MoveKey(n, quarantine.Decision{Op: quarantine.OpUnlink, Comm: "rm\x1b[2J"}); err != nil {
			t.Fatal(err)
		}
	}
	area.Close()
	r := runBinary(t, "quarantine", "list", "--store", store, "--index", filepath.Join(t.TempDir(), "index"))
	if r.code != 0 {
		t.Fatalf("quarantine list: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{`"job/bad\xffname"`, `"job/nl\nname"`, `"rm\x1b[2J"`} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("quarantine list does not show %s:\n%s", want, r.stdout)
		}
	}
	if strings.Contains(r.stdout, "\ufffd") || strings.Contains(r.stdout, "\x1b") {
		t.Errorf("quarantine list shows replacement characters or an escape: %q", r.stdout)
	}
}
