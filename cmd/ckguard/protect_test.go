package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestProtectHostPaths: --protect globs are matched against store keys; one written as a path on this
// host (below the store directory, as given or absolute) or as a URI would match nothing, so it is
// refused with the glob to write instead. A glob relative to the store root is accepted.
func TestProtectHostPaths(t *testing.T) {
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sf := []string{"--store", tr.Root, "--index", filepath.Join(dir, "index")}
	tests := []struct {
		glob, want string // want: "" accepted, else a part of the error
	}{
		{"flink/ha", ""},
		{"ha", ""},
		{"/ha", ""},
		{tr.Root + "/flink/ha", `relative to the store root (--protect "flink/ha")`},
		{tr.Root + "/", "the directory"},
		{"s3://bucket/flink/ha", "is a URI"},
		{"file:///srv/flink/ha", "is a URI"},
	}
	for _, tc := range tests {
		t.Run(tc.glob, func(t *testing.T) {
			out, code := run(t, append(append([]string{"stats"}, sf...), "--protect", tc.glob)...)
			if tc.want == "" {
				if code != 0 {
					t.Errorf("--protect %q refused: %d %s", tc.glob, code, out)
				}
				return
			}
			if code == 0 {
				t.Errorf("--protect %q accepted: %s", tc.glob, out)
			}
			if err := protectNotHostPaths([]string{tc.glob}, tr.Root); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--protect %q: %v, want %q", tc.glob, err, tc.want)
			}
		})
	}
}
