package shared_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// oddKeys are store keys a user of an --allow-other mount can give a file: bytes that are not UTF-8,
// a newline, "..", a very long name. Every record keyed by one must keep its exact bytes.
var oddKeys = []string{
	"job/shared/\xff\xfe-not-utf8",
	"job/chk-1/a\nb",
	"../outside/the/store",
	"job/" + strings.Repeat("x", 8000),
	"\x00b64:looks-escaped",
}

// TestRedteamHoldKeysWithOddBytes: a fleet hold recorded for a key that is not UTF-8 (or that has a
// newline, "..", 8,000 bytes) keeps its exact key, and one such record never stops the lease holder
// listing (and so releasing) the other holds no mount needs.
func TestRedteamHoldKeysWithOddBytes(t *testing.T) {
	ctx := context.Background()
	c, err := shared.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	a, b := shared.NewHolds(c, "hosta-m"), shared.NewHolds(c, "hostb-m")
	keys := append([]string{"job/chk-1/plain"}, oddKeys...)
	for _, k := range keys {
		if err := a.Need(ctx, k, ""); err != nil {
			t.Fatalf("need %.40q: %v", k, err)
		}
		if _, _, err := a.Drop(ctx, k, false); err != nil {
			t.Fatalf("drop %.40q: %v", k, err)
		}
	}
	orphans, err := b.Orphans(ctx)
	if err != nil {
		t.Fatalf("the lease holder cannot list the holds no mount needs: %v", err)
	}
	got := map[string]bool{}
	for _, o := range orphans {
		got[o.Key] = true
	}
	for _, k := range keys {
		if !got[k] {
			t.Errorf("orphan %.40q not listed with its exact bytes (%d listed)", k, len(orphans))
		}
		rec, ok, err := b.Get(ctx, k)
		if err != nil || !ok || rec.Key != k {
			t.Errorf("get %.40q: %.40q %v %v", k, rec.Key, ok, err)
		}
		if release, _, err := b.Claim(ctx, k); err != nil || !release {
			t.Errorf("claim %.40q: %v %v", k, release, err)
		}
	}
}

// TestRedteamPinKeysWithOddBytes: a pin of a _metadata whose path is not UTF-8 pins that path (on
// every mount), and never makes the pins unreadable: a failed load refuses the retirement of every
// live checkpoint on every mount of the store.
func TestRedteamPinKeysWithOddBytes(t *testing.T) {
	ctx := context.Background()
	c, err := shared.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	p := shared.NewPins(c, "hosta")
	for _, k := range append([]string{"job/chk-1/_metadata"}, oddKeys...) {
		if _, err := p.Set(ctx, k, true, "op@hosta"); err != nil {
			t.Fatalf("pin %.40q: %v", k, err)
		}
	}
	pins, err := shared.NewPins(c, "hostb").Load(ctx)
	if err != nil {
		t.Fatalf("one pin's odd key made the store's pins unreadable: %v", err)
	}
	for _, k := range append([]string{"job/chk-1/_metadata"}, oddKeys...) {
		if _, ok := pins[k]; !ok {
			t.Errorf("pin of %.40q not loaded with its exact bytes (got %d pins)", k, len(pins))
		}
	}
}

// TestRedteamRestoreKeysWithOddBytes: a restore record of an entry whose path is not UTF-8 names
// that path exactly, so a later restore of the path finds who restored it.
func TestRedteamRestoreKeysWithOddBytes(t *testing.T) {
	ctx := context.Background()
	c, err := shared.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i, k := range oddKeys {
		id := fmt.Sprintf("e%d-%s", i, k)
		if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: id, Key: k, Mount: "hosta-m", Host: "hosta"}, now); err != nil {
			t.Fatal(err)
		}
		if err := shared.FinishRestore(ctx, c, id, "hosta-m", nil, now); err != nil {
			t.Fatal(err)
		}
	}
	recs, err := shared.Restores(ctx, c)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recs {
		got[r.Key] = r.Entry
	}
	for i, k := range oddKeys {
		if got[k] != fmt.Sprintf("e%d-%s", i, k) {
			t.Errorf("restore of %.40q not recorded with its exact path and entry (%d records)", k, len(got))
		}
	}
}

// TestRedteamRestoreClaimOfCrashedHost: a claim left `restoring` by a mount killed mid-restore
// refuses the restore elsewhere naming the host, the mount and the claim's time, and says when the
// claim lapses and what to do; after RestoreClaimTTL the entry is claimed again.
func TestRedteamRestoreClaimOfCrashedHost(t *testing.T) {
	ctx := context.Background()
	c := sharedtest.NewMem()
	t0 := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "crashed-m", Host: "crashed"}, t0); err != nil {
		t.Fatal(err)
	}
	// crashed-m was killed here: it never finishes.
	err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "b-m", Host: "b"}, t0.Add(time.Minute))
	var already *shared.AlreadyRestoredError
	if !errors.As(err, &already) {
		t.Fatalf("claim over a live claim: %v", err)
	}
	msg := err.Error()
	for _, want := range []string{"crashed", "crashed-m", "2026-12-07T16:00:00Z", "2026-12-07T16:10:00Z", "retry"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not name %q", msg, want)
		}
	}
	if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "b-m", Host: "b"}, t0.Add(shared.RestoreClaimTTL)); err != nil {
		t.Fatalf("a crashed mount's claim still blocks the restore after its TTL: %v", err)
	}
}

// TestRedteamRestoreClaimWithSkewedClock: a claim dated in the future by a host whose clock is ahead
// (then killed) keeps other mounts off for at most twice RestoreClaimTTL of their time, whatever the
// skew, and the refusal says the claim's time is ahead of this host's clock; a claim dated far in the
// past (a clock behind) lapses at once, which loses nothing: a restore never replaces a file.
func TestRedteamRestoreClaimWithSkewedClock(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	for _, skew := range []time.Duration{time.Minute, time.Hour, 24 * time.Hour, 100 * 365 * 24 * time.Hour} {
		c := sharedtest.NewMem()
		if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "ahead-m", Host: "ahead"}, now.Add(skew)); err != nil {
			t.Fatal(err)
		}
		err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "b-m", Host: "b"}, now)
		if skew < shared.RestoreClaimTTL {
			if !errors.As(err, new(*shared.AlreadyRestoredError)) || !strings.Contains(err.Error(), "ahead of this host's clock") {
				t.Errorf("skew %v: a fresh claim from a host ahead: %v", skew, err)
			}
		}
		if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "b-m", Host: "b"}, now.Add(2*shared.RestoreClaimTTL)); err != nil {
			t.Errorf("skew %v: a claim dated in the future still blocks the restore two TTLs later: %v", skew, err)
		}
	}
	c := sharedtest.NewMem()
	if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "behind-m", Host: "behind"}, now.Add(-24*time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := shared.ClaimRestore(ctx, c, shared.Restore{Entry: "e1", Key: "job/f", Mount: "b-m", Host: "b"}, now); err != nil {
		t.Errorf("a claim dated a day back: %v", err)
	}
}

// TestRedteamRestoreClaimDamaged: a restore record that is not JSON (in the envelope or in its data)
// refuses that entry's restore naming the record and what to do, never panics, and leaves every other
// entry's claim alone.
func TestRedteamRestoreClaimDamaged(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	plant := func(id string, data []byte) {
		dir := filepath.Join(root, shared.Dir, shared.Version, filepath.FromSlash(shared.RestoreName(id))+".rec")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d", 1)), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	inner, _ := json.Marshal(shared.Envelope{Format: 1, Writes: []string{"x"}, Data: json.RawMessage(`[1,2,3]`)})
	plant("bad-envelope", []byte("not json \x00\xff"))
	plant("bad-data", inner)
	for _, id := range []string{"bad-envelope", "bad-data"} {
		rc := &shared.RestoreClaims{C: c, Mount: "b-m", Host: "b"}
		done, err := rc.Claim(ctx, id, "job/f")
		if err == nil {
			done(nil)
			t.Errorf("%s: claimed over a damaged record", id)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "damaged") || !strings.Contains(msg, "move it away") || !strings.Contains(msg, filepath.Join(root, shared.Dir)) {
			t.Errorf("%s: refusal does not name the damaged record and the fix: %v", id, err)
		}
		if _, _, err := shared.RestoreOf(ctx, c, id); err == nil {
			t.Errorf("%s: read as a record", id)
		}
	}
	rc := &shared.RestoreClaims{C: c, Mount: "b-m", Host: "b"}
	done, err := rc.Claim(ctx, "fine", "job/g")
	if err != nil {
		t.Fatalf("a damaged record of another entry refused this one: %v", err)
	}
	done(nil)
	// A record for an entry no quarantine holds is only its history: an explanation, never a refusal.
	orig := errors.New("no such entry")
	if got := rc.Explain(ctx, "never-staged", orig); got != orig {
		t.Errorf("explain of an unknown entry: %v", got)
	}
}

// TestRedteamRestoreClaimHuge: a record file of hostile length (64 MiB, sparse) is refused as damaged
// without reading it whole.
func TestRedteamRestoreClaimHuge(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, shared.Dir, shared.Version, filepath.FromSlash(shared.RestoreName("huge"))+".rec")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%020d", 1)))
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(64 << 20); err != nil {
		t.Fatal(err)
	}
	f.Close()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	rc := &shared.RestoreClaims{C: c, Mount: "b-m", Host: "b"}
	_, err = rc.Claim(ctx, "huge", "job/f")
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("claimed over a 64 MiB record")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("reading a 64 MiB record allocated %d MiB", grew>>20)
	}
	if !strings.Contains(err.Error(), "damaged") {
		t.Errorf("refusal: %v", err)
	}
}

// TestRedteamHoldReleasedConcurrently: two mounts letting one hold go at the same moment, both
// believing they hold the sweeper lease (the lease's residual window): the hold is released at most
// once per round, never while a mount needs it, and ends released.
func TestRedteamHoldReleasedConcurrently(t *testing.T) {
	ctx := context.Background()
	c, err := shared.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for round := range 20 {
		key := fmt.Sprintf("job/shared/f%d", round)
		a, b := shared.NewHolds(c, "hosta-m"), shared.NewHolds(c, "hostb-m")
		for _, h := range []*shared.Holds{a, b} {
			if err := h.Need(ctx, key, ""); err != nil {
				t.Fatal(err)
			}
		}
		var wg sync.WaitGroup
		releases := make([]bool, 2)
		for i, h := range []*shared.Holds{a, b} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rel, _, err := h.Drop(ctx, key, true)
				if err != nil {
					t.Error(err)
				}
				releases[i] = rel
			}()
		}
		wg.Wait()
		if releases[0] == releases[1] {
			t.Fatalf("round %d: releases %v: want exactly one releaser", round, releases)
		}
		h := a
		if releases[1] {
			h = b
		}
		if rehold, err := h.Released(ctx, key); err != nil || rehold {
			t.Fatalf("round %d: released: %v %v", round, rehold, err)
		}
		rec, _, _ := a.Get(ctx, key)
		if rec.State != shared.HeldOff || len(rec.Needers) != 0 {
			t.Fatalf("round %d: %+v", round, rec)
		}
	}
}

// TestRedteamHoldNeedOfKilledMount: a mount killed after recording its need and before setting the
// hold keeps the record needed (the safe side: nothing is released under it), and the same mount,
// started again, drops the need when its rules let the key go, after which the lease holder releases.
func TestRedteamHoldNeedOfKilledMount(t *testing.T) {
	ctx := context.Background()
	c, err := shared.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const key = "job/chk-3/f"
	if err := shared.NewHolds(c, "killed-m").Need(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	lease := shared.NewHolds(c, "lease-m")
	if rel, _, err := lease.Drop(ctx, key, true); err != nil || rel {
		t.Fatalf("the lease holder released a key another mount needs: %v %v", rel, err)
	}
	if o, err := lease.Orphans(ctx); err != nil || len(o) != 0 {
		t.Fatalf("orphans while a (killed) mount needs it: %v %v", o, err)
	}
	if ok, _, err := lease.Claim(ctx, key); err != nil || ok {
		t.Fatalf("claimed a needed hold: %v %v", ok, err)
	}
	if _, _, err := shared.NewHolds(c, "killed-m").Drop(ctx, key, false); err != nil {
		t.Fatal(err)
	}
	o, err := lease.Orphans(ctx)
	if err != nil || len(o) != 1 || o[0].Key != key {
		t.Fatalf("orphans after the restarted mount let go: %v %v", o, err)
	}
}

// TestRedteamDamagedHoldRecordRefusesOnlyItself: one hold record that does not decode (a torn copy,
// an object put beside the mounts) keeps its own object held, but the lease holder still lists, and
// so releases, every other hold no mount needs; the damaged record is named.
func TestRedteamDamagedHoldRecordRefusesOnlyItself(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	a := shared.NewHolds(c, "hosta-m")
	for _, k := range []string{"job/chk-1/f", "job/chk-1/g"} {
		if err := a.Need(ctx, k, ""); err != nil {
			t.Fatal(err)
		}
		if _, _, err := a.Drop(ctx, k, false); err != nil {
			t.Fatal(err)
		}
	}
	bad := shared.HeldName("job/chk-1/broken")
	dir := filepath.Join(root, shared.Dir, shared.Version, filepath.FromSlash(bad)+".rec")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("%020d", 1)), []byte(`{"format":1,"writes":["x"],"data":{"key":`), 0o600); err != nil {
		t.Fatal(err)
	}
	orphans, err := shared.NewHolds(c, "lease-m").Orphans(ctx)
	if len(orphans) != 2 {
		t.Errorf("one damaged hold record kept the lease holder from every release: %d orphans listed, err %v", len(orphans), err)
	}
	var damaged *shared.DamagedError
	if !errors.As(err, &damaged) || !strings.Contains(err.Error(), bad) {
		t.Errorf("the damaged record is not named: %v", err)
	}
}

// TestRedteamHeartbeatFromAClockAhead: a mount whose clock ran a day ahead, killed: its last
// heartbeat is dated tomorrow. It is live (for the outdated-mount check, `ckguard fleet`) only while
// its heartbeat is within the bound of this host's clock either way, never until tomorrow comes.
func TestRedteamHeartbeatFromAClockAhead(t *testing.T) {
	now := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	m := shared.Mount{ID: "ahead-0123456789ab", Host: "ahead", SyncInterval: 30}
	for _, c := range []struct {
		hb   time.Duration
		live bool
	}{{0, true}, {-60 * time.Second, true}, {5 * time.Second, true}, {60 * time.Second, true}, {-80 * time.Second, false}, {80 * time.Second, false}, {24 * time.Hour, false}} {
		m.Heartbeat = now.Add(c.hb)
		if got := shared.Live(m, now); got != c.live {
			t.Errorf("heartbeat %v from now: live %v, want %v", c.hb, got, c.live)
		}
	}
}

// TestRedteamSharedFolderReplacedWhileMounted: on a store root everyone may write without the sticky
// bit, another user renames ckguard's `.ckguard` away while the mount runs and puts an empty one of
// theirs in its place. The open area must not read that one as the store's pins (no pins: every
// checkpoint an operator pinned would be retired) nor write into it: it refuses, naming the folder.
func TestRedteamSharedFolderReplacedWhileMounted(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	c, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := shared.NewPins(c, "hosta").Set(ctx, "job/chk-1/_metadata", true, "op"); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(filepath.Join(root, shared.Dir), filepath.Join(root, "moved-away")); err != nil {
		t.Fatal(err)
	}
	other := 65534
	for _, d := range []string{shared.Dir, shared.Dir + "/" + shared.Version, shared.Dir + "/" + shared.Version + "/.tmp"} {
		p := filepath.Join(root, d)
		if err := os.Mkdir(p, 0o777); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			if err := os.Chown(p, other, other); err != nil {
				t.Fatal(err)
			}
		}
	}
	pins, err := shared.NewPins(c, "hosta").Load(ctx)
	if err == nil {
		t.Errorf("the replaced folder was read as the store's pins: %d pins", len(pins))
	} else if !strings.Contains(err.Error(), filepath.Join(root, shared.Dir)) {
		t.Errorf("refusal does not name the folder: %v", err)
	}
	if _, err := c.Put(ctx, "pins/0123456789abcdef0123456789abcdef", []byte(`{}`), ""); err == nil {
		t.Error("wrote a record into another user's folder")
	}
	if _, _, err := c.Get(ctx, shared.PinName("job/chk-1/_metadata")); err == nil || errors.Is(err, os.ErrNotExist) {
		t.Errorf("get in the replaced folder: %v, want a refusal", err)
	}
}

// TestRedteamTwoHostsOneMountID: two hosts of one store whose names differ only in case or in
// characters a record name cannot hold ("Bastion-1", "bastion-1"), or that share one name (cloned VMs,
// containers with a fixed hostname), with the default index folder (the same path everywhere: it is
// named by the store's identity), must not share one mount id: the fleet's hold records count needers
// by it, so one host letting a key go would drop the other's need and the lease holder would release
// a hold the other still needs.
func TestRedteamTwoHostsOneMountID(t *testing.T) {
	t.Skip("known hole: shared.MountID(host, index) is the sanitized lower-case host name and a hash of the " +
		"index path, so such hosts get one id: one heartbeat record between them (ckguard fleet shows one), " +
		"one needer in holds/ (a Drop by one removes the other's need), and restore claims that take each " +
		"other's as their own retry. A fix needs an id unique per index folder (a random one kept in it) and a " +
		"migration of the needs recorded under the old ids")
	const index = "/var/lib/ckguard/index-0123456789abcdef"
	for _, hosts := range [][2]string{{"Bastion-1", "bastion-1"}, {"ckguard", "ckguard"}} {
		a, b := shared.MountID(hosts[0], index), shared.MountID(hosts[1], index)
		if a == b {
			t.Errorf("hosts %q and %q: one mount id %s", hosts[0], hosts[1], a)
		}
	}
	ctx := context.Background()
	c := sharedtest.NewMem()
	const key = "job/shared/sst-1"
	ha, hb := shared.NewHolds(c, shared.MountID("Bastion-1", index)), shared.NewHolds(c, shared.MountID("bastion-1", index))
	if err := ha.Need(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	if err := hb.Need(ctx, key, ""); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ha.Drop(ctx, key, false); err != nil {
		t.Fatal(err)
	}
	if o, err := shared.NewHolds(c, "lease-m").Orphans(ctx); err != nil || len(o) != 0 {
		t.Errorf("a key bastion-1 still needs is an orphan for the lease holder: %v %v", o, err)
	}
}

// TestRedteamTwoMountsOneIDAreNamed: while the hole above stands, two live mounts writing one mount
// record are told so: the heartbeat of each fails naming the other's host, index and start, which the
// mount logs and shows as stale shared state (CkguardSharedStateStale), instead of passing unseen.
func TestRedteamTwoMountsOneIDAreNamed(t *testing.T) {
	ctx := context.Background()
	c := sharedtest.NewMem()
	const index = "/root/.cache/ckguard/store-0123"
	id := shared.MountID("ckguard", index)
	t0 := time.Date(2026, 12, 7, 16, 0, 0, 0, time.UTC)
	ma := shared.Mount{ID: id, Host: "ckguard", Index: index, Started: t0, SyncInterval: 30}
	mb := shared.Mount{ID: id, Host: "ckguard", Index: index, Started: t0.Add(time.Hour), SyncInterval: 30}
	ha, hb := shared.NewHeartbeater(c), shared.NewHeartbeater(c)
	var taken *shared.MountIDTakenError
	if err := ha.Beat(ctx, ma); err != nil {
		t.Fatal(err)
	}
	if err := hb.Beat(ctx, mb); err != nil {
		t.Fatal(err) // its first beat cannot tell another mount from its own previous run
	}
	if err := ha.Beat(ctx, ma); !errors.As(err, &taken) || !strings.Contains(err.Error(), "2026-12-07T17:00:00Z") {
		t.Errorf("a's beat after b's: %v", err)
	}
	if err := hb.Beat(ctx, mb); !errors.As(err, &taken) || !strings.Contains(err.Error(), "2026-12-07T16:00:00Z") {
		t.Errorf("b's beat after a's: %v", err)
	}
	// One mount alone, restarted after a kill -9: its new run takes the record over without a word.
	hc := shared.NewHeartbeater(c)
	mc := mb
	mc.Started = t0.Add(2 * time.Hour)
	for range 3 {
		if err := hc.Beat(ctx, mc); err != nil {
			t.Errorf("a restarted mount's beat: %v", err)
		}
	}
}

// TestRedteamDamagedPinRefusesOnlyItsCheckpoint: on S3 anyone with s3:PutObject on the store's prefix
// (a Flink job's own credentials, commonly) can put an object under `.ckguard/v1/pins/` that does not
// decode. Its name is the hash of the one `_metadata` it could pin, so only that checkpoint's retirement
// needs refusing; every other pin should still load.
func TestRedteamDamagedPinRefusesOnlyItsCheckpoint(t *testing.T) {
	ctx := context.Background()
	c := sharedtest.NewMem()
	p := shared.NewPins(c, "hosta")
	if _, err := p.Set(ctx, "job/chk-1/_metadata", true, "op"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Put(ctx, shared.PinName("job/chk-2/_metadata"), []byte("not json"), ""); err != nil {
		t.Fatal(err)
	}
	pins, err := shared.NewPins(c, "hostb").Load(ctx)
	if _, ok := pins["job/chk-1/_metadata"]; !ok {
		t.Errorf("one damaged pin record hid every pin: %v %v", pins, err)
	}
	var damaged *shared.DamagedPinsError
	if !errors.As(err, &damaged) || !damaged.Covers("job/chk-2/_metadata") || damaged.Covers("job/chk-1/_metadata") {
		t.Errorf("Load's error does not scope the damaged record to its one checkpoint: %v", err)
	}
}
