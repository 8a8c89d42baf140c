package hold

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestRedteamDamagedFleetRecordReleasesTheRest: a mount let two holds go and has no lease; beside
// their records lies one that does not decode. The lease holder's pass releases both, keeps the
// damaged record's object as it is, and fails naming that record (so the status shows it).
func TestRedteamDamagedFleetRecordReleasesTheRest(t *testing.T) {
	area := sharedtest.NewMem()
	prim := &flagPrim{held: map[string]bool{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	newEngine := func(id string, lease bool, ix *setIndex) *Engine {
		l, err := OpenLedger(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		var lb atomic.Bool
		lb.Store(lease)
		e := New(Options{Primitive: prim, Index: ix, Ledger: l, Logger: quiet, StatusDir: t.TempDir(),
			Fleet: testFleet{shared.NewHolds(area, id), &lb}})
		t.Cleanup(func() { e.Close() })
		return e
	}
	ctx := context.Background()
	aix := &setIndex{prot: map[string]bool{"j/shared/1": true, "j/shared/2": true}}
	a := newEngine("host-a", false, aix)
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	aix.mu.Lock()
	aix.prot = map[string]bool{}
	aix.mu.Unlock()
	if err := a.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	prim.held["j/shared/broken"] = true
	bad := shared.HeldName("j/shared/broken")
	if _, err := area.Put(ctx, bad, []byte(`{"format":1,"data":`), ""); err != nil {
		t.Fatal(err)
	}
	b := newEngine("host-b", true, &setIndex{prot: map[string]bool{}})
	err := b.Pass(ctx)
	if prim.on("j/shared/1") || prim.on("j/shared/2") {
		t.Errorf("one damaged fleet record kept the lease holder from releasing the others: held %v", prim.held)
	}
	if !prim.on("j/shared/broken") {
		t.Error("the damaged record's object was released")
	}
	var damaged *shared.DamagedError
	if !errors.As(err, &damaged) || !strings.Contains(err.Error(), bad) {
		t.Errorf("the lease holder's pass does not name the damaged record: %v", err)
	}
}

// TestRedteamReferencesIntoCkguardFolders: a `_metadata` any user of the store can write may
// reference files in ckguard's own folders at the store root: the quarantine's staged entries and the
// shared area's records. The hold pass never holds them: an immutable flag or legal hold there would
// make those entries impossible to restore or purge and the records' old generations impossible to
// remove, on every mount of the store.
func TestRedteamReferencesIntoCkguardFolders(t *testing.T) {
	prim := &flagPrim{held: map[string]bool{}}
	l, err := OpenLedger(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	reserved := []string{
		".ckguard-quarantine/entry-1",
		".ckguard/v1/pins/0123456789abcdef0123456789abcdef.rec/00000000000000000001",
		".ckguard/v1/restores/0123456789abcdef0123456789abcdef.rec/00000000000000000001",
	}
	ix := &setIndex{prot: map[string]bool{"job/chk-1/f": true}}
	for _, k := range reserved {
		ix.prot[k] = true
	}
	e := New(Options{Primitive: prim, Index: ix, Ledger: l, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), StatusDir: t.TempDir()})
	defer e.Close()
	if err := e.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !prim.on("job/chk-1/f") {
		t.Fatal("the checkpoint's own file is not held")
	}
	for _, k := range reserved {
		if prim.on(k) {
			t.Errorf("held ckguard's own file %s", k)
		}
	}
}

// killedPrim is the store of a mount killed right after it recorded its need in the fleet: its hold
// request never arrives.
type killedPrim struct{ *flagPrim }

func (killedPrim) Hold(context.Context, string, string) error {
	return errors.New("the mount was killed before its hold was sent")
}

// TestRedteamNeedOfKilledMount: a mount killed between recording its need and setting the hold. While
// it is down its need keeps the lease holder from releasing the key; started again with the same
// ledger and no longer protecting the key, it drops the need, and the lease holder then releases.
func TestRedteamNeedOfKilledMount(t *testing.T) {
	area := sharedtest.NewMem()
	prim := &flagPrim{held: map[string]bool{}}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	ctx := context.Background()
	const k = "j/shared/sst-1"
	ledgerDir := t.TempDir()
	engine := func(id string, lease bool, p Primitive, ix *setIndex, dir string) *Engine {
		l, err := OpenLedger(dir)
		if err != nil {
			t.Fatal(err)
		}
		var lb atomic.Bool
		lb.Store(lease)
		return New(Options{Primitive: p, Index: ix, Ledger: l, Logger: quiet, StatusDir: t.TempDir(),
			Fleet: testFleet{shared.NewHolds(area, id), &lb}})
	}
	a1 := engine("host-a", false, killedPrim{prim}, &setIndex{prot: map[string]bool{k: true}}, ledgerDir)
	_ = a1.Pass(ctx) // killed: its hold never arrives
	a1.Close()
	rec, ok, err := shared.NewHolds(area, "x").Get(ctx, k)
	if err != nil || !ok || rec.Needers["host-a"].IsZero() {
		t.Fatalf("the killed mount's need: %+v %v %v", rec, ok, err)
	}
	prim.held[k] = true // say another path held it meanwhile: the need must keep it
	b := engine("host-b", true, prim, &setIndex{prot: map[string]bool{}}, t.TempDir())
	defer b.Close()
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if !prim.on(k) {
		t.Fatal("the lease holder released a key a killed mount recorded it needs")
	}
	a2 := engine("host-a", false, prim, &setIndex{prot: map[string]bool{}}, ledgerDir)
	defer a2.Close()
	if err := a2.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if prim.on(k) {
		t.Errorf("after the restarted mount let the key go, the lease holder kept it held")
	}
	if rec, _, _ := shared.NewHolds(area, "x").Get(ctx, k); len(rec.Needers) != 0 || rec.State != shared.HeldOff {
		t.Errorf("record %+v", rec)
	}
}
