package refindex_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

const crashEnv = "CKGUARD_CRASH_CHILD"

// TestCrashChild is the child process of TestCrashSafety: it opens the index, says "ready", runs a
// rebuild or a sync and says "done". The parent SIGKILLs it somewhere in between.
func TestCrashChild(t *testing.T) {
	mode := os.Getenv(crashEnv)
	if mode == "" {
		t.Skip("child process of TestCrashSafety")
	}
	st, err := localstore.New(os.Getenv("CKGUARD_CRASH_STORE"))
	if err != nil {
		t.Fatal(err)
	}
	opts := []refindex.Option{refindex.WithLogger(quiet), refindex.WithParseWorkers(2)}
	if mode == "sync-multi" {
		opts = append(opts, refindex.WithTxnWrites(300)) // the change spans dozens of transactions
	}
	ix, err := refindex.Open(os.Getenv("CKGUARD_CRASH_INDEX"), st, crashPolicy(), opts...)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	if mode == "rebuild" {
		err = ix.Rebuild(context.Background())
	} else {
		err = ix.Sync(context.Background())
	}
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("done")
	ix.Close()
}

func crashPolicy() refindex.Policy {
	p := refindex.DefaultPolicy()
	p.MaxStaleness, p.Grace, p.ActiveWindow = 0, 0, 0
	return p
}

// liveSet returns the live _metadata keys the index holds.
func liveSet(t *testing.T, ix *refindex.Index) []string {
	t.Helper()
	res, err := ix.Checkpoints(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, j := range res.Jobs {
		for _, c := range j.Checkpoints {
			out = append(out, c.Metadata)
		}
	}
	sort.Strings(out)
	return out
}

func listMetadata(t *testing.T, root string) []string {
	st, _ := localstore.New(root)
	var out []string
	st.ListMetadata(context.Background(), func(o store.ObjectInfo) error { out = append(out, o.Path); return nil })
	sort.Strings(out)
	return out
}

// TestCrashSafety kills a process with SIGKILL in the middle of a rebuild and of a sync, then reopens
// the index: it must hold exactly the old or the new set of checkpoints, and every object any
// checkpoint it holds references must be refused. A sync whose change spans several transactions
// ("sync-multi") may also be caught half-way: the reopened index must then say so and refuse every
// deletion, and its next sync must rebuild it to the new state.
func TestCrashSafety(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes; run without -short")
	}
	for _, mode := range []string{"rebuild", "sync", "sync-multi"} {
		t.Run(mode, func(t *testing.T) { crashRounds(t, mode) })
	}
}

func crashRounds(t *testing.T, mode string) {
	ctx := context.Background()
	root := t.TempDir()
	// Sync applies ≤256 changed _metadata in one transaction, more by building a new generation;
	// the rebuild case uses a store large enough that a rebuild takes a while.
	spec := treegen.LargeSpec{Jobs: 8, CheckpointsPerJob: 25, RefsPerCheckpoint: 400, NewPerCheckpoint: 40, Seed: "crash", DataFiles: true}
	if mode != "rebuild" {
		spec.CheckpointsPerJob = 12
	}
	lr, err := treegen.Large(filepath.Join(root, "store"), spec, time.Now().Add(-48*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	idx := filepath.Join(root, "index")
	st, _ := localstore.New(lr.Root)
	ix, err := refindex.Open(idx, st, crashPolicy(), refindex.WithLogger(quiet))
	if err != nil {
		t.Fatal(err)
	}
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	oldSet := liveSet(t, ix)
	ix.Close()
	// Change the store: retire the oldest checkpoint of every job, add a new job restored from job 0
	// (its checkpoints reference job 0's SSTs).
	for j := 0; j < spec.Jobs; j++ {
		os.Remove(filepath.Join(lr.Root, treegen.LargeJob(spec.Seed, j), "chk-1000", "_metadata"))
	}
	extra := spec
	extra.Seed, extra.Jobs = "crash-extra", 2
	if _, err := treegen.Large(filepath.Join(root, "store"), extra, time.Now().Add(-47*time.Hour)); err != nil {
		t.Fatal(err)
	}
	newSet := listMetadata(t, lr.Root)
	t.Logf("store generated: %d → %d checkpoints", len(oldSet), len(newSet))

	// Measure the operation once to spread the kills over it.
	took := runChild(t, mode, lr.Root, idx, -1)
	t.Logf("%s in a child process: %s from ready to done", mode, took)
	// Kills spread from "right after open" to past the end (the last rounds see the finished state).
	const rounds = 7
	for r := 0; r < rounds; r++ {
		resetIndex(t, idx)
		delay := time.Duration(int64(took) * int64(r) / 5)
		runChild(t, mode, lr.Root, idx, delay)
		ix, err := refindex.Open(idx, st, crashPolicy(), refindex.WithLogger(quiet))
		if err != nil {
			t.Fatalf("round %d (killed after %s): reopen: %v", r, delay, err)
		}
		got := liveSet(t, ix)
		state := map[bool]string{true: "old", false: "new"}[slices.Equal(got, oldSet)]
		if mode == "sync-multi" && !slices.Equal(got, oldSet) && !slices.Equal(got, newSet) {
			// Caught between two transactions: detected, every deletion refused, rebuilt by the sync.
			d := ix.Decide(ctx, "any/file", verdict.OpUnlink)
			if d.Allow || !strings.Contains(d.Message, "stopped in the middle") {
				t.Fatalf("round %d (killed after %s): half-written index (%d checkpoints) decides %+v; want every deletion refused, saying why", r, delay, len(got), d)
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			got, state = liveSet(t, ix), "half-written (detected; rebuilt by the next sync) → new"
			if !slices.Equal(got, newSet) {
				t.Errorf("round %d: after the rebuilding sync the index holds %d checkpoints, want the new %d", r, len(got), len(newSet))
			}
		}
		t.Logf("round %d: killed %s after ready: reopened index holds the %s state", r, delay.Round(time.Millisecond), state)
		if !slices.Equal(got, oldSet) && !slices.Equal(got, newSet) {
			t.Errorf("round %d (killed after %s): index holds %d checkpoints, neither the old (%d) nor the new (%d) state", r, delay, len(got), len(oldSet), len(newSet))
		}
		// Every object of every checkpoint the index holds and the store still has is refused.
		t0 := time.Now()
		checkRefsRefused(t, ix, lr.Root, got)
		ix.Close()
		t.Logf("round %d: checked in %s", r, time.Since(t0).Round(time.Millisecond))
	}
}

// resetIndex puts the index back to the old state from the copy runChild saved before the first,
// uninterrupted run (idx+".old").
func resetIndex(t *testing.T, idx string) {
	t.Helper()
	if _, err := os.Stat(idx + ".old"); err != nil {
		t.Fatalf("no saved old index: %v", err)
	}
	os.RemoveAll(idx)
	if out, err := exec.Command("cp", "-a", idx+".old", idx).CombinedOutput(); err != nil {
		t.Fatalf("restore old index: %v %s", err, out)
	}
}

func checkRefsRefused(t *testing.T, ix *refindex.Index, root string, live []string) {
	t.Helper()
	ctx := context.Background()
	for _, meta := range live {
		b, err := os.ReadFile(filepath.Join(root, meta))
		if err != nil {
			continue // retired in the store; the index may still hold it (old state): protecting more is safe
		}
		// Ground truth from the parser, independent of the index under test.
		m, err := flinkmeta.ParseBytes(b, meta, flinkmeta.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.References(meta) {
			key := strings.TrimPrefix(r.URI, "file:"+root+"/")
			if d := ix.Decide(ctx, key, verdict.OpUnlink); d.Allow {
				t.Fatalf("after the crash, %s (referenced by %s) may be deleted: %s", key, meta, d.Message)
			}
		}
	}
}

// runChild runs the child; with delay ≥ 0 it is SIGKILLed that long after it said "ready".
func runChild(t *testing.T, mode, store, idx string, delay time.Duration) time.Duration {
	t.Helper()
	if delay < 0 {
		// First (measuring) run: save the old index for the kill rounds.
		os.RemoveAll(idx + ".old")
		if out, err := exec.Command("cp", "-a", idx, idx+".old").CombinedOutput(); err != nil {
			t.Fatalf("save old index: %v %s", err, out)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), crashEnv+"="+mode, "CKGUARD_CRASH_STORE="+store, "CKGUARD_CRASH_INDEX="+idx)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(out)
	done := make(chan bool, 1)
	ready := make(chan struct{})
	var readyAt, doneAt time.Time
	go func() {
		finished := false
		for sc.Scan() {
			switch strings.TrimSpace(sc.Text()) {
			case "ready":
				readyAt = time.Now()
				close(ready)
			case "done":
				doneAt = time.Now()
				finished = true
			}
		}
		done <- finished
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		cmd.Process.Kill()
		t.Fatal("child did not start")
	}
	if delay >= 0 {
		time.Sleep(delay)
		cmd.Process.Signal(syscall.SIGKILL)
	}
	finished := <-done
	cmd.Wait()
	if delay < 0 && !finished {
		t.Fatal("child did not finish")
	}
	return doneAt.Sub(readyAt)
}

// TestReopenWithEmptyLogsLeftByKill: badger creates a write-ahead or value-log file and sizes it in
// two steps; kill -9 between them leaves a zero-byte file that badger itself refuses to open
// (TestCrashSafety hit it once in CI). The reopened index must hold its state and decide as before.
func TestReopenWithEmptyLogsLeftByKill(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	ix := openTreeIn(t, tr, dir)
	if err := ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	before := liveSet(t, ix)
	ix.Close()
	gens, _ := filepath.Glob(filepath.Join(dir, "gen-*"))
	if len(gens) != 1 {
		t.Fatalf("index generations: %v", gens)
	}
	for _, name := range []string{"00042.mem", "00042.vlog"} {
		if err := os.WriteFile(filepath.Join(gens[0], name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ix = openTreeIn(t, tr, dir) // fails with badger's "Create a new file" unless the empty logs are removed
	defer ix.Close()
	if got := liveSet(t, ix); !slices.Equal(got, before) {
		t.Fatalf("reopened index holds %v, before the kill %v", got, before)
	}
	for _, k := range tr.Referenced() {
		if d := ix.Decide(ctx, k, verdict.OpUnlink); d.Allow {
			t.Errorf("%s is referenced but may be deleted after the reopen: %s", k, d.Message)
		}
	}
	// Not merely refusing everything (a stale index would): garbage is still deletable.
	allowed := 0
	for _, k := range tr.Garbage("", treegen.DefaultPolicy) {
		if !strings.HasSuffix(k, "/_metadata") && ix.Decide(ctx, k, verdict.OpUnlink).Allow {
			allowed++
		}
	}
	if allowed == 0 {
		t.Error("the reopened index allows no deletion of garbage: it lost its synced state")
	}
}
