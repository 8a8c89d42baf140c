package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// TestFlinkFixturesMatchFlinkLoader checks ckguard's parser against Flink's own loader on the real
// checkpoints under testdata/flink: for every _metadata, the set of referenced storage objects
// (files, segments with offset/length, file-merging directories, changelog files) must equal what
// Checkpoints.loadCheckpointMetadata reported when the fixture was made (expected-references.json).
// It needs no JVM, so it runs in every `go test ./...`; TestE2EInspectMatchesFlink does the same
// through the `ckguard inspect --json` binary.
func TestFlinkFixturesMatchFlinkLoader(t *testing.T) {
	root := filepath.Join(e2eRepoRoot(t), "testdata", "flink")
	n, sized := 0, 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "_metadata" {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		parts := strings.SplitN(filepath.ToSlash(rel), "/", 3) // <version>/<scenario>/store/...
		n++
		t.Run(rel, func(t *testing.T) {
			want := readExpectedRefs(t, filepath.Join(filepath.Dir(p), "expected-references.json"))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			m, err := flinkmeta.ParseBytes(b, p, flinkmeta.Options{})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if m.CheckpointID != want.CheckpointID {
				t.Errorf("checkpoint id %d, Flink says %d", m.CheckpointID, want.CheckpointID)
			}
			// Flink read the file where it wrote it; resolve relative handles at the same place.
			written := flinkLocalPath(want.Metadata)
			got := map[string]bool{}
			for _, r := range m.References(written) {
				got[e2eRefKey(string(r.Kind), flinkLocalPath(r.Resolved), r.Offset, r.Length)] = true
			}
			e2eCompareSets(t, rel, flinkReferenceSet(want, "", ""), got)
			// The size each file handle declares (what verify --deep holds the file to) is the one
			// Flink's loader reports for it.
			flinkSize := map[string]int64{}
			for _, r := range want.References {
				if r.Kind == "file" || r.Kind == "relative" {
					flinkSize[flinkLocalPath(r.Path)] = r.Length
				}
			}
			for _, r := range m.References(written) {
				if r.Kind != flinkmeta.RefFile && r.Kind != flinkmeta.RefRelative {
					continue
				}
				if w, ok := flinkSize[flinkLocalPath(r.Resolved)]; ok && w > 0 {
					sized++
				}
				if w, ok := flinkSize[flinkLocalPath(r.Resolved)]; ok && w > 0 && r.StateSize != w {
					t.Errorf("%s: state size %d, Flink says %d", r.Resolved, r.StateSize, w)
				}
			}
			if len(parts) == 3 && len(want.References) == 0 {
				t.Errorf("fixture %s has no references at all; regenerate it", rel)
			}
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if sized == 0 {
		t.Error("no file handle's state size was compared with Flink's")
	}
	if n < 30 {
		t.Fatalf("only %d _metadata fixtures under %s; expected the 1.20, 2.0 and 2.2 sets", n, root)
	}
}
