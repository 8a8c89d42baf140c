package integration

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

var (
	ckguardOnce sync.Once
	ckguardBin  string
	ckguardErr  error
	ckguardDir  string
)

// ckguard builds the binary once per test run (go build ./cmd/ckguard) and returns its path.
func e2eCkguard(t *testing.T) string {
	t.Helper()
	ckguardOnce.Do(func() {
		ckguardDir, ckguardErr = os.MkdirTemp("", "ckguard-e2e-bin-")
		if ckguardErr != nil {
			return
		}
		ckguardBin = filepath.Join(ckguardDir, "ckguard")
		cmd := exec.Command("go", "build", "-o", ckguardBin, "./cmd/ckguard")
		cmd.Dir = e2eRepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			ckguardErr = &e2eBuildError{err: err, out: string(out)}
		}
	})
	if ckguardErr != nil {
		t.Fatalf("go build ./cmd/ckguard: %v", ckguardErr)
	}
	return ckguardBin
}

type e2eBuildError struct {
	err error
	out string
}

func (e *e2eBuildError) Error() string { return e.err.Error() + "\n" + e.out }

// requireCommand skips (fails in CI) while a ckguard command is still the skeleton's placeholder:
// the mount, index and S3 pieces are built in parallel with these tests.
func e2eRequireCommand(t *testing.T, name string) {
	t.Helper()
	out, _ := e2eRun(context.Background(), "", e2eCkguard(t), name, "--help")
	if strings.Contains(out, "not built yet") {
		e2ePrerequisite(t, "`ckguard %s` is not built yet", name)
	}
}

// ckguardRun runs ckguard with a timeout and returns output and exit code.
func e2eCkguardRun(t *testing.T, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	return e2eRun(ctx, "", e2eCkguard(t), args...)
}

// inspectReferences is the set of resolved references `ckguard inspect --json` reports, as
// (kind, local path, offset, length) keys comparable with Flink's loader.
func inspectReferences(t *testing.T, metadata string) (map[string]bool, error) {
	t.Helper()
	out, code := e2eCkguardRun(t, "inspect", "--json", metadata)
	if code != 0 {
		return nil, &e2eBuildError{err: e2eExit(code), out: out}
	}
	var doc struct {
		CheckpointID int64 `json:"checkpoint_id"`
		References   []struct {
			Kind     string `json:"kind"`
			URI      string `json:"uri"`
			Resolved string `json:"resolved"`
			Offset   int64  `json:"offset"`
			Length   int64  `json:"length"`
		} `json:"references"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		return nil, &e2eBuildError{err: err, out: out}
	}
	set := map[string]bool{}
	for _, r := range doc.References {
		set[e2eRefKey(r.Kind, flinkLocalPath(r.Resolved), r.Offset, r.Length)] = true
	}
	return set, nil
}

type e2eExit int

func (e e2eExit) Error() string { return "exit status " + strconv.Itoa(int(e)) }

// refKey identifies a reference for comparison. Offsets and lengths matter only for segments: for
// whole files Flink's handle size and ckguard's reported length may legitimately differ in form.
func e2eRefKey(kind, path string, off, length int64) string {
	if kind == "segment" {
		return kind + " " + path + " @" + strconv.FormatInt(off, 10) + "+" + strconv.FormatInt(length, 10)
	}
	if kind == "relative" {
		kind = "file"
	}
	return kind + " " + path
}

// flinkReferenceSet is refKey over Flink's own listing; pathMap rewrites a path prefix (for
// fixtures copied away from where Flink wrote them).
func flinkReferenceSet(r flinkRefs, from, to string) map[string]bool {
	set := map[string]bool{}
	for _, ref := range r.References {
		p := flinkLocalPath(ref.Path)
		if from != "" && strings.HasPrefix(p, from) {
			p = to + strings.TrimPrefix(p, from)
		}
		set[e2eRefKey(ref.Kind, p, ref.Offset, ref.Length)] = true
	}
	return set
}

// compareSets reports what one side has that the other lacks.
func e2eCompareSets(t *testing.T, what string, flink, ours map[string]bool) {
	t.Helper()
	var missing, extra []string
	for k := range flink {
		if !ours[k] {
			missing = append(missing, k)
		}
	}
	for k := range ours {
		if !flink[k] {
			extra = append(extra, k)
		}
	}
	if len(missing) > 0 || len(extra) > 0 {
		t.Errorf("%s: ckguard inspect differs from Flink's loader (%d refs): missing %d %v, extra %d %v",
			what, len(flink), len(missing), e2eHead(missing), len(extra), e2eHead(extra))
	}
}

func e2eHead(s []string) []string {
	if len(s) > 5 {
		return s[:5]
	}
	return s
}
