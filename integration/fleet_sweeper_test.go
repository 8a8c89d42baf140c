package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
)

// TestFleetSweeperLease: two --shared --quarantine mounts (two processes, two index folders) of one
// local store. Only the sweeper lease's holder purges: every entry staged through either mount is
// purged once, by the holder alone. Then the holder is killed with kill -9 while entries wait for
// their TTL: the other mount takes the lease after it expired and purges them, each once; nothing
// staged is lost before its TTL.
func TestFleetSweeperLease(t *testing.T) {
	mntRequire(t)
	store := filepath.Join(t.TempDir(), "store")
	old := time.Now().Add(-30 * 24 * time.Hour)
	write := func(key string) {
		t.Helper()
		p := filepath.Join(store, filepath.FromSlash(key))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("garbage "+key), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	var first, second []string
	for i := range 4 {
		first = append(first, fmt.Sprintf("garbage/a/f%d", i))
		second = append(second, fmt.Sprintf("garbage/b/f%d", i))
	}
	for _, k := range append(append([]string{}, first...), second...) {
		write(k)
	}
	const qttl = 3 * time.Second
	flags := []string{"--shared", "--quarantine", qttl.String(), "--sync-interval", "1s"}
	ps := []*mntProc{mntStart(t, store, "", flags...), mntStart(t, store, "", flags...)}
	host, _ := os.Hostname()
	area, err := shared.NewLocal(store)
	if err != nil {
		t.Fatal(err)
	}
	holder := func() (int, shared.LeaseRecord) {
		t.Helper()
		data, _, err := shared.Read(context.Background(), area, "leases/sweeper")
		if err != nil {
			return -1, shared.LeaseRecord{}
		}
		var rec shared.LeaseRecord
		if err := json.Unmarshal(data, &rec); err != nil {
			t.Fatal(err)
		}
		for i, p := range ps {
			if abs, _ := filepath.Abs(p.index); shared.MountID(host, abs) == rec.Holder {
				return i, rec
			}
		}
		return -1, rec
	}
	waitHolder := func(not int, within time.Duration) (int, shared.LeaseRecord) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			if i, rec := holder(); i >= 0 && i != not {
				return i, rec
			}
			if time.Now().After(deadline) {
				i, rec := holder()
				t.Fatalf("no mount (other than %d) holds the sweeper lease after %s: %d %+v", not, within, i, rec)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	purges := func(p *mntProc) map[string]int {
		n := map[string]int{}
		for _, r := range p.auditRecords() {
			if r.Op == "quarantine-purge" {
				n[r.Path]++
			}
		}
		return n
	}
	waitPurged := func(keys []string, by []*mntProc, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		for {
			done := true
			for _, k := range keys {
				total := 0
				for _, p := range by {
					total += purges(p)[k]
				}
				if total == 0 {
					done = false
				}
			}
			if done {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("entries %v not purged within %s", keys, within)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	h, rec := waitHolder(-1, 30*time.Second)
	t.Logf("mount %d holds the sweeper lease, generation %d", h+1, rec.Gen)
	// Staged through both mounts: purged once each, by the holder.
	for i, k := range first {
		if err := os.Remove(ps[i%2].m(k)); err != nil {
			t.Fatalf("rm %s through mount %d: %v", k, i%2+1, err)
		}
	}
	waitPurged(first, ps, qttl+15*time.Second)
	time.Sleep(2 * time.Second) // a second purge would come within a sync or two
	for _, k := range first {
		if n := purges(ps[h])[k]; n != 1 {
			t.Errorf("%s purged %d times by the holder, want once", k, n)
		}
		if n := purges(ps[1-h])[k]; n != 0 {
			t.Errorf("%s purged %d times by the mount without the lease", k, n)
		}
	}

	// kill -9 of the holder with entries waiting for their TTL.
	other := 1 - h
	for _, k := range second {
		if err := os.Remove(ps[other].m(k)); err != nil {
			t.Fatalf("rm %s: %v", k, err)
		}
	}
	staged := time.Now()
	ps[h].kill9()
	killed := time.Now()
	h2, rec2 := waitHolder(h, 30*time.Second)
	took := time.Since(killed)
	t.Logf("mount %d took the lease %s after the holder's kill -9 (generation %d → %d; lease TTL 3 sync intervals = 3s)", h2+1, took.Round(time.Millisecond), rec.Gen, rec2.Gen)
	if rec2.Gen <= rec.Gen {
		t.Errorf("generation %d after the takeover, want above %d", rec2.Gen, rec.Gen)
	}
	if took < 1500*time.Millisecond {
		t.Errorf("lease taken %s after the kill, before it could have expired", took)
	}
	// Nothing purged before its TTL: they are all still staged right after the takeover unless due.
	waitPurged(second, ps[other:other+1], qttl+20*time.Second)
	for _, k := range second {
		if n := purges(ps[other])[k]; n != 1 {
			t.Errorf("%s purged %d times by the new holder, want once", k, n)
		}
	}
	for _, r := range ps[other].auditRecords() {
		if r.Op == "quarantine-purge" && r.Time.Before(staged.Add(qttl)) {
			for _, k := range second {
				if r.Path == k {
					t.Errorf("%s purged at %s, before its TTL (staged %s)", k, r.Time, staged)
				}
			}
		}
	}
	if out, code := mntRun(t, "", mntBinary(t), "quarantine", "list", "--store", store, "--index", ps[other].index); code != 0 {
		t.Errorf("quarantine list: exit %d: %s", code, out)
	} else {
		t.Logf("quarantine list after the purges:\n%s", out)
	}
}
