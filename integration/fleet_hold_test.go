package integration

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestFleetHoldImmutable (issues 31/32, local): two --shared mounts of one ext4 store with --hold
// required keep one record of the held files in the store's shared area. A checkpoint retired beside
// the mounts frees files in the view of mount 2, which syncs every second, while mount 1 (which
// syncs hourly) still counts them referenced: they keep the flag (mount 2 waits, "releasing"), whoever
// holds the sweeper lease. Once mount 1 sees the retirement too (restarted: its first sync), neither
// needs them and the lease holder clears their flags within a few passes; everything still
// referenced stays flagged throughout.
func TestFleetHoldImmutable(t *testing.T) {
	mntRequire(t)
	base1, tr := immutableStore(t)
	base2, err := os.MkdirTemp("", "ckguard-ext4-immutable-base2-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base2) })
	slow := []string{"--shared", "--hold", "required", "--sync-interval", "1h", "--max-staleness", "0s"}
	fast := []string{"--shared", "--hold", "required", "--sync-interval", "1s"}
	p1 := sharedMount(t, base1, tr.Root, slow...)
	p2 := sharedMount(t, base2, tr.Root, fast...)
	all := tr.AllFiles()
	prot := protectedSet(tr)
	waitFlags(t, p1, tr, all, prot, "after the first syncs")
	// waitHolding waits for n held by p and nothing pending; releasing: how many entries p may still
	// show waiting for the lease holder (they go at p's next pass, an hour away on mount 1).
	waitHolding := func(p *mntProc, n, releasing int, what string) {
		t.Helper()
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			s := holdStatus(t, p)
			if s.Held == n && s.Pending == 0 && s.Releasing <= releasing {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: %s: %+v, want %d held, nothing pending, at most %d releasing after 30 s", p.index, what, s, n, releasing)
			}
		}
	}
	for _, p := range []*mntProc{p1, p2} { // each mount's own pass (the flags may be the other's)
		waitHolding(p, len(prot), 0, "after the first syncs")
	}

	// Retire the current job's older checkpoint beside the mounts (its _metadata's flag cleared by
	// hand first, as an operator would).
	cur := "flink-checkpoints/" + treegen.IncidentOneNewJob
	var older string
	var olderID int64
	for k, c := range tr.Live {
		if c.Job == cur && (older == "" || c.ID < olderID) {
			older, olderID = k, c.ID
		}
	}
	prot2, freed := retireHeld(t, tr, older, prot)
	if len(freed) == 0 {
		t.Fatalf("retiring %s frees no file: the scenario no longer tests the release", older)
	}
	// Mount 2 lets them go (it shows them releasing), mount 1 still needs them: flagged.
	deadline := time.Now().Add(30 * time.Second)
	for holdStatus(t, p2).Releasing < len(freed) {
		if time.Now().After(deadline) {
			t.Fatalf("mount 2 does not let the %d freed files go within 30 s: %+v\n%s", len(freed), holdStatus(t, p2), p2.logText())
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(3 * time.Second) // three more passes of mount 2
	for _, k := range freed {
		if !immutable(t, tr, k) {
			t.Errorf("%s lost its flag although mount 1's view still references it", k)
		}
	}
	for _, k := range prot2 {
		if !immutable(t, tr, k) {
			t.Errorf("%s, still referenced, lost its flag", k)
		}
	}

	// Mount 1 sees the retirement at its restart's first sync: the freed files' flags go.
	p1.stop()
	p1.start(append([]string{"--allow-other"}, slow...)...)
	waitFlags(t, p2, tr, all, prot2, "after mount 1 saw the retirement too")
	waitHolding(p2, len(prot2), 0, "after mount 1 saw the retirement too")
	waitHolding(p1, len(prot2), len(freed)+1, "after its restart")
	if out, code := mntRun(t, "", "rm", filepath.Join(tr.Root, filepath.FromSlash(freed[0]))); code != 0 {
		t.Errorf("rm %s beside the mounts after both let it go: exit %d\n%s", freed[0], code, out)
	}
}
