package integration

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"sync"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// mntMetadata encodes a checkpoint _metadata whose shared SSTs are absolute file: URIs into the store and
// whose private files are relative handles next to it, as Flink's RocksDB incremental checkpoints are.
func mntMetadata(t testing.TB, storeRoot string, id int64, shared, private []string) []byte {
	t.Helper()
	m := flinkmeta.NewCheckpoint(6, id, true)
	op := flinkmeta.NewOperator(flinkmeta.ID("writer/keyed"), "keyed", "keyed", 1, 128)
	var sh, pr []flinkmeta.NamedHandle
	for i, k := range shared {
		sh = append(sh, flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("%06d.sst", i+1), Handle: flinkmeta.File("file:"+storeRoot+"/"+k, 64)})
	}
	for i, n := range private {
		pr = append(pr, flinkmeta.NamedHandle{LocalPath: fmt.Sprintf("MANIFEST-%06d", i+1), Handle: flinkmeta.Relative(n, 64)})
	}
	meta := flinkmeta.Inline(fmt.Sprintf("meta-%d", id), []byte("rocksdb-meta"))
	op.Subtasks = []flinkmeta.SubtaskState{{Index: 0, ManagedKeyed: flinkmeta.Incremental(id, 0, 128, meta, sh, pr)}}
	op.ForVersion(6)
	m.Operators = []flinkmeta.OperatorState{op}
	b, err := flinkmeta.Encode(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// writeRetry creates a file through the mount; concurrent cleanups may remove the (empty, unprotected)
// folder between MkdirAll and the create, so it retries like a writer that recreates its directory.
func writeRetry(path string, data []byte) error {
	var err error
	for range 50 {
		if err = os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			continue
		}
		if err = os.WriteFile(path, data, 0o644); err == nil || !errors.Is(err, fs.ErrNotExist) {
			return err
		}
	}
	return err
}

// flinkWriter writes checkpoints through the mount as Flink does: new SSTs and private files, then the
// _metadata (directly, or as a temp file renamed onto _metadata like the recoverable writer), then it
// subsumes the previous checkpoint: deletes its _metadata, its private files and the SSTs nothing uses.
type flinkWriter struct {
	t        testing.TB
	mnt      string
	store    string
	job      string
	live     map[int64][]string // checkpoint -> shared SSTs
	private  map[int64][]string
	sstCount int
}

func (w *flinkWriter) checkpoint(id int64, viaRename bool) error {
	var shared []string
	if prev, ok := w.live[id-1]; ok {
		shared = append(shared, prev[len(prev)/2:]...) // keep half of the previous SSTs (incremental)
	}
	for range 3 {
		w.sstCount++
		k := fmt.Sprintf("%s/shared/sst-%05d", w.job, w.sstCount)
		if err := writeRetry(filepath.Join(w.mnt, k), []byte(k)); err != nil {
			return fmt.Errorf("write %s: %w", k, err)
		}
		shared = append(shared, k)
	}
	dir := fmt.Sprintf("%s/chk-%d", w.job, id)
	private := []string{fmt.Sprintf("private-%d-a", id), fmt.Sprintf("private-%d-b", id)}
	for _, n := range private {
		if err := writeRetry(filepath.Join(w.mnt, dir, n), []byte(n)); err != nil {
			return fmt.Errorf("write %s/%s: %w", dir, n, err)
		}
	}
	meta := mntMetadata(w.t, w.store, id, shared, private)
	target := filepath.Join(w.mnt, dir, "_metadata")
	if viaRename {
		// Flink's recoverable writer (local FS, HDFS) names it "." + "_metadata" + ".inprogress." + a UUID;
		// only that name commits through the grace rule (fs/guard.IsMetadataCommit).
		tmp := filepath.Join(w.mnt, dir, "._metadata.inprogress.0b6f3c1e-5d2a-4e8b-9c7f-"+fmt.Sprintf("%012d", id))
		if err := writeRetry(tmp, meta); err != nil {
			return err
		}
		if err := os.Rename(tmp, target); err != nil {
			return fmt.Errorf("rename onto _metadata: %w", err)
		}
	} else if err := writeRetry(target, meta); err != nil {
		return fmt.Errorf("write _metadata: %w", err)
	}
	w.live[id] = shared
	w.private[id] = private
	return nil
}

// subsume retires checkpoint id as Flink does once a newer one completed. Deletions that find the file
// already gone (a concurrent cleanup got there first) are fine; refusals are not.
func (w *flinkWriter) subsume(id int64) error {
	dir := fmt.Sprintf("%s/chk-%d", w.job, id)
	rm := func(k string) error {
		err := os.Remove(filepath.Join(w.mnt, k))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("subsume chk-%d: remove %s: %w", id, k, err)
		}
		return nil
	}
	if err := rm(dir + "/_metadata"); err != nil {
		return err
	}
	for _, n := range w.private[id] {
		if err := rm(dir + "/" + n); err != nil {
			return err
		}
	}
	if err := rm(dir); err != nil && !errors.Is(err, syscall.ENOTEMPTY) {
		return err
	}
	used := map[string]bool{}
	for cid, s := range w.live {
		if cid != id {
			for _, k := range s {
				used[k] = true
			}
		}
	}
	for _, k := range w.live[id] {
		if !used[k] {
			if err := rm(k); err != nil {
				return err
			}
		}
	}
	delete(w.live, id)
	delete(w.private, id)
	return nil
}

// expected is what must be in the store while only the newest checkpoint is live.
func (w *flinkWriter) expected() []string {
	var out []string
	for id, s := range w.live {
		out = append(out, s...)
		out = append(out, fmt.Sprintf("%s/chk-%d/_metadata", w.job, id))
		for _, n := range w.private[id] {
			out = append(out, fmt.Sprintf("%s/chk-%d/%s", w.job, id, n))
		}
	}
	sort.Strings(out)
	return out
}

// TestMountWriterThroughGuard: a checkpoint written through the mount is protected the moment its
// _metadata is closed (or renamed into place); a cleanup storm removes nothing of it; the next checkpoint,
// written and subsuming through the mount, leaves exactly what it references.
func TestMountWriterThroughGuard(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, store, "")
	w := &flinkWriter{t: t, mnt: p.mnt, store: store, job: "job_writer", live: map[int64][]string{}, private: map[int64][]string{}}
	if err := w.checkpoint(1, false); err != nil {
		t.Fatal(err)
	}
	// A stray young file nothing references: in grace, the storm must leave it too (it could be in flight).
	if err := os.WriteFile(filepath.Join(p.mnt, "job_writer/shared/in-flight"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Cleanup storm with every tool, right after the close returned (no sync in between can help).
	mntRun(t, "", "rm", "-rf", p.m("job_writer"))
	mntRun(t, "", "find", p.mnt, "-delete")
	mntRun(t, "", "python3", "-c", "import shutil,sys; shutil.rmtree(sys.argv[1], ignore_errors=True)", p.m("job_writer"))
	mntSameSet(t, "after the storm", mntFiles(t, store), append(w.expected(), "job_writer/shared/in-flight"))
	if err := os.Remove(p.m("job_writer/shared/in-flight")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("young unreferenced file: %v, want EPERM (grace)", err)
	}
	// The next checkpoint via temp file + rename (the recoverable writer), then Flink subsumes chk-1.
	if err := w.checkpoint(2, true); err != nil {
		t.Fatal(err)
	}
	if err := w.subsume(1); err != nil {
		t.Fatal(err)
	}
	os.Remove(filepath.Join(store, "job_writer/shared/in-flight")) // not part of the checkpoint history
	mntSameSet(t, "after subsumption through the mount", mntFiles(t, store), w.expected())
	p.stop()
	if ok, broken := verifyIndex(t, store, p.index); !ok {
		t.Errorf("verify: %s", broken)
	}
}

// TestMountConcurrentDeletersAndWriter: four cleanup processes (rm -rf, find -delete, shutil.rmtree, rm -rf)
// hammer the job folder while a writer creates and subsumes checkpoints through the mount. Nothing the live
// checkpoint references is ever lost, and the writer's own subsumption is never refused.
func TestMountConcurrentDeletersAndWriter(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, store, "")
	w := &flinkWriter{t: t, mnt: p.mnt, store: store, job: "job_busy", live: map[int64][]string{}, private: map[int64][]string{}}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	deleters := [][]string{
		{"rm", "-rf", p.m("job_busy")},
		{"find", p.m("job_busy"), "-delete"},
		{"python3", "-c", "import shutil,sys; shutil.rmtree(sys.argv[1], ignore_errors=True)", p.m("job_busy")},
		{"rm", "-rf", p.m("job_busy/shared"), p.m("job_busy")},
	}
	runs := make([]int, len(deleters))
	for i, argv := range deleters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				_ = exec.Command(argv[0], argv[1:]...).Run()
				runs[i]++
			}
		}()
	}
	var werr error
	for id := int64(1); id <= 40 && werr == nil; id++ {
		werr = w.checkpoint(id, id%2 == 0)
		if werr == nil && id > 1 {
			werr = w.subsume(id - 1)
		}
		if werr == nil {
			// The live checkpoint is complete at every step.
			for _, k := range w.expected() {
				if _, err := os.Stat(filepath.Join(store, k)); err != nil {
					werr = fmt.Errorf("after checkpoint %d: %s lost: %v", id, k, err)
				}
			}
		}
	}
	close(stop)
	wg.Wait()
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("cleanup runs per deleter: %v", runs)
	// What is left is the live checkpoint plus young unreferenced leftovers (grace); nothing it needs is gone.
	got := map[string]bool{}
	for _, k := range mntFiles(t, store) {
		got[k] = true
	}
	for _, k := range w.expected() {
		if !got[k] {
			t.Errorf("referenced %s missing", k)
		}
	}
	p.stop()
	if ok, broken := verifyIndex(t, store, p.index); !ok {
		t.Errorf("verify: %s", broken)
	}
}
