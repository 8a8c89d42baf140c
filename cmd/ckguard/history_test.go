package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestRestoreMetadataCLI: checkpoints --history lists a _metadata deleted behind the index's back as
// retired (text and JSON), restore-metadata brings it back byte-identical (exit 0), a second one refuses
// to overwrite (exit 2), and one the history never saw fails naming the fix.
func TestRestoreMetadataCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, prefix, refs := drillFixture(t)
	var meta string
	for j, cks := range refs {
		for id := range cks {
			meta = filepath.ToSlash(filepath.Join(j, "chk-"+strconv.Itoa(id), "_metadata"))
			break
		}
		break
	}
	base := []string{"--store", root, "--index", filepath.Join(t.TempDir(), "index"), "--map", prefix + "="}
	run := func(args ...string) cliResult {
		t.Helper()
		return runBinary(t, append(append([]string{args[0]}, base...), args[1:]...)...)
	}
	if r := run("checkpoints", "--history"); r.code != 0 || !strings.Contains(r.stdout, meta) || strings.Contains(r.stdout, "retired 20") {
		t.Fatalf("history of the intact store (exit %d):\n%s%s", r.code, r.stdout, r.stderr)
	}
	p := filepath.Join(root, filepath.FromSlash(meta))
	orig, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	removed := time.Now().Truncate(time.Second)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	// The text form names the retired checkpoint on its line with when it went.
	if r := run("checkpoints", "--history"); r.code != 0 || !regexp.MustCompile(regexp.QuoteMeta(meta)+` .*; retired 20\d\d-`).MatchString(r.stdout) || !strings.Contains(r.stdout, "(1 retired)") {
		t.Fatalf("history after %s went (exit %d): want its line marked retired with a time\n%s%s", meta, r.code, r.stdout, r.stderr)
	}
	r := run("checkpoints", "--history", "--json")
	var h struct {
		Entries []struct {
			Metadata string `json:"metadata"`
			Retired  string `json:"retired"`
			SHA256   string `json:"sha256"`
		} `json:"entries"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &h); err != nil {
		t.Fatalf("history --json: %v\n%s", err, r.stdout)
	}
	found := false
	for _, e := range h.Entries {
		if e.Metadata == meta {
			went, err := time.Parse(time.RFC3339Nano, e.Retired)
			found = err == nil && e.SHA256 != ""
			if found && (went.Before(removed) || went.After(time.Now())) {
				t.Errorf("%s retired at %v, but it was deleted at %v (now %v)", meta, went, removed, time.Now())
			}
		}
	}
	if !found {
		t.Fatalf("%s not listed as retired with a copy:\n%s", meta, r.stdout)
	}
	for _, tc := range []struct {
		name, arg string
		code      int
		want      string
	}{
		{"restore", filepath.Dir(meta), 0, "indexed"},
		{"never overwrites", meta, 2, "never overwritten"},
		{"unknown checkpoint", "nosuchjob/chk-1", 2, "checkpoints --history"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := run("restore-metadata", tc.arg)
			if r.code != tc.code || !strings.Contains(r.stdout+r.stderr, tc.want) {
				t.Fatalf("restore-metadata %s: exit %d, want %d with %q:\n%s%s", tc.arg, r.code, tc.code, tc.want, r.stdout, r.stderr)
			}
			if got, _ := os.ReadFile(p); !bytes.Equal(got, orig) {
				t.Fatalf("%s is not the original after restore-metadata %s", meta, tc.arg)
			}
		})
	}
}
