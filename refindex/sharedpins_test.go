package refindex_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

func sharedTree(t *testing.T) (*treegen.Tree, string, string) {
	t.Helper()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	cur := "flink-checkpoints/" + treegen.IncidentOneNewJob + "/chk-100273"
	old := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100270/x"
	return tr, cur, old
}

func sharedArea(t *testing.T, root string) shared.CAS {
	t.Helper()
	c, err := shared.NewLocal(root)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSharedPinsAcrossIndexes: two indexes of one store with shared pins: a pin through one protects
// in the other from its next sync, an unpin through the other releases in the first from its next.
func TestSharedPinsAcrossIndexes(t *testing.T) {
	ctx := context.Background()
	tr, cur, _ := sharedTree(t)
	area := sharedArea(t, tr.Root)
	a := openSynced(t, localStore(t, tr.Root), refindex.WithSharedPins(shared.NewPins(area, "host-a")))
	b := openSynced(t, localStore(t, tr.Root), refindex.WithSharedPins(shared.NewPins(area, "host-b")))
	meta := cur + "/_metadata"
	if d := b.Decide(ctx, meta, verdict.OpUnlink); !d.Allow {
		t.Fatalf("before any pin: %+v", d)
	}
	if _, err := a.Pin(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if d := a.Decide(ctx, meta, verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
		t.Errorf("the pinning index: %+v", d)
	}
	syncIndex(t, b)
	if d := b.Decide(ctx, meta, verdict.OpUnlink); d.Reason != verdict.ReasonPinned || !strings.Contains(d.Message, "ckguard unpin") {
		t.Errorf("the other index after a sync: %+v", d)
	}
	if _, err := b.Unpin(ctx, cur); err != nil {
		t.Fatal(err)
	}
	if d := b.Decide(ctx, meta, verdict.OpUnlink); !d.Allow {
		t.Errorf("the unpinning index: %+v", d)
	}
	syncIndex(t, a)
	if d := a.Decide(ctx, meta, verdict.OpUnlink); !d.Allow {
		t.Errorf("the first index after the unpin and a sync: %+v", d)
	}
	// Nothing local: the pins live in the area alone.
	if b, err := os.ReadFile(filepath.Join(t.TempDir(), "pins.json")); err == nil && bytes.Contains(b, []byte(cur)) {
		t.Errorf("pins.json holds a shared pin")
	}
}

// TestSharedPinExpires: a pin past its expiry protects no more from the next sync.
func TestSharedPinExpires(t *testing.T) {
	ctx := context.Background()
	tr, cur, _ := sharedTree(t)
	area := sharedArea(t, tr.Root)
	pins := shared.NewPins(area, "h")
	ix := openSynced(t, localStore(t, tr.Root), refindex.WithSharedPins(pins))
	meta := cur + "/_metadata"
	if _, err := pins.Change(ctx, shared.Pin{Key: meta, Pinned: true, Why: "short", Expires: time.Now().Add(time.Second)}); err != nil {
		t.Fatal(err)
	}
	syncIndex(t, ix)
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
		t.Fatalf("pinned, not expired: %+v", d)
	}
	time.Sleep(1100 * time.Millisecond)
	syncIndex(t, ix)
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); !d.Allow {
		t.Errorf("expired pin still protects: %+v", d)
	}
}

// failingCAS fails every listing while fail is set.
type failingCAS struct {
	shared.CAS
	fail atomic.Bool
}

func (f *failingCAS) List(ctx context.Context, prefix string) ([]shared.Entry, error) {
	if f.fail.Load() {
		return nil, errors.New("injected: access denied")
	}
	return f.CAS.List(ctx, prefix)
}

// TestSharedPinsUnreadableFailsClosed: while the shared pins cannot be read no checkpoint is retired
// (a pin from another host may hold it), and only that: an unreferenced old file is still deletable;
// reading them again releases.
func TestSharedPinsUnreadableFailsClosed(t *testing.T) {
	ctx := context.Background()
	tr, cur, old := sharedTree(t)
	fc := &failingCAS{CAS: sharedArea(t, tr.Root)}
	fc.fail.Store(true)
	ix := openIndex(t, t.TempDir(), localStore(t, tr.Root), refindex.WithSharedPins(shared.NewPins(fc, "h")))
	defer ix.Close()
	syncIndex(t, ix) // the sync itself succeeds: the store is readable
	meta := cur + "/_metadata"
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); d.Allow || !strings.Contains(d.Message, "shared pins cannot be read") {
		t.Errorf("a checkpoint with unreadable shared pins: %+v", d)
	}
	if d := ix.Decide(ctx, cur, verdict.OpRmdir); d.Allow {
		t.Errorf("its folder with unreadable shared pins: %+v", d)
	}
	if d := ix.Decide(ctx, old, verdict.OpUnlink); !d.Allow {
		t.Errorf("an unreferenced old file refused because the shared pins are unreadable: %+v", d)
	}
	if s := ix.SharedPinsStatus(); s.Error == "" {
		t.Errorf("status shows no error: %+v", s)
	}
	fc.fail.Store(false)
	syncIndex(t, ix)
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); !d.Allow {
		t.Errorf("after the pins were read again: %+v", d)
	}
}

// pinnedLocally returns sharedTree's tree, its current checkpoint cur and an index folder whose index
// (closed again) pinned cur before the store had a shared area: a pin kept in the index alone.
func pinnedLocally(t *testing.T) (tr *treegen.Tree, cur, dir string) {
	t.Helper()
	tr, cur, _ = sharedTree(t)
	dir = t.TempDir()
	ix := openIndex(t, dir, localStore(t, tr.Root))
	defer ix.Close()
	syncIndex(t, ix)
	if _, err := ix.Pin(context.Background(), cur); err != nil {
		t.Fatal(err)
	}
	return tr, cur, dir
}

// TestSharedPinsMigration: an index's local pins move into the shared area at its first sync with
// shared pins, once, with a log line; another index of the store then honours them.
func TestSharedPinsMigration(t *testing.T) {
	ctx := context.Background()
	tr, cur, dir := pinnedLocally(t)
	area := sharedArea(t, tr.Root)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	ix := openIndex(t, dir, localStore(t, tr.Root), refindex.WithSharedPins(shared.NewPins(area, "h")), refindex.WithLogger(log))
	defer ix.Close()
	syncIndex(t, ix)
	meta := cur + "/_metadata"
	if !strings.Contains(logs.String(), "moved the local pins into the shared area") || !strings.Contains(logs.String(), meta) {
		t.Errorf("no migration log line naming the pin:\n%s", logs.String())
	}
	if d := ix.Decide(ctx, meta, verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
		t.Errorf("migrated pin lost: %+v", d)
	}
	other := openSynced(t, localStore(t, tr.Root), refindex.WithSharedPins(shared.NewPins(area, "h2")))
	if d := other.Decide(ctx, meta, verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
		t.Errorf("another index does not honour the migrated pin: %+v", d)
	}
	logs.Reset()
	syncIndex(t, ix)
	if strings.Contains(logs.String(), "moved the local pins") {
		t.Errorf("migrated twice:\n%s", logs.String())
	}
}

// readOnly is an observer's shared pins: loaded, never written.
type readOnly struct{ *shared.Pins }

func (readOnly) Set(context.Context, string, bool, string) (time.Time, error) {
	return time.Time{}, refindex.ErrSharedReadOnly
}

// TestSharedPinsReadOnlyObserver: an observer's local pins keep protecting beside the shared ones
// (they cannot be moved), the shared ones protect, and a pin through it is refused naming the mode.
func TestSharedPinsReadOnlyObserver(t *testing.T) {
	ctx := context.Background()
	tr, cur, dir := pinnedLocally(t)
	area := sharedArea(t, tr.Root)
	writer := shared.NewPins(area, "w")
	other := "flink-checkpoints/" + treegen.IncidentOneNewJob + "/chk-100274/_metadata"
	if _, err := writer.Change(ctx, shared.Pin{Key: other, Pinned: true}); err != nil {
		t.Fatal(err)
	}
	obs := openIndex(t, dir, localStore(t, tr.Root), refindex.WithSharedPins(readOnly{shared.NewPins(area, "o")}))
	defer obs.Close()
	syncIndex(t, obs)
	for _, k := range []string{cur + "/_metadata", other} {
		if d := obs.Decide(ctx, k, verdict.OpUnlink); d.Reason != verdict.ReasonPinned {
			t.Errorf("%s on the observer: %+v", k, d)
		}
	}
	if _, err := obs.Pin(ctx, cur); !errors.Is(err, refindex.ErrSharedReadOnly) {
		t.Errorf("pin through the observer: %v, want ErrSharedReadOnly", err)
	}
}

// TestSharedPinsDamagedRecordRefusesItsCheckpointOnly: one shared pin record that does not decode
// (anyone who can write the area's prefix can plant one) keeps only the checkpoint it is named for
// from retirement; every other checkpoint is judged by the pins read, and a readable pin still
// protects. Moving the record away releases.
func TestSharedPinsDamagedRecordRefusesItsCheckpointOnly(t *testing.T) {
	ctx := context.Background()
	tr, cur, _ := sharedTree(t)
	area := sharedArea(t, tr.Root)
	pins := shared.NewPins(area, "h")
	ix := openSynced(t, localStore(t, tr.Root), refindex.WithSharedPins(pins))
	damaged := "flink-checkpoints/" + treegen.IncidentOneOldJob + "/chk-100271/_metadata"
	pinned := "flink-checkpoints/" + treegen.IncidentOneNewJob + "/chk-100274/_metadata"
	if _, err := area.Put(ctx, shared.PinName(damaged), []byte("not json"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := pins.Set(ctx, pinned, true, "kept"); err != nil {
		t.Fatal(err)
	}
	syncIndex(t, ix)
	if d := ix.Decide(ctx, damaged, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonPinned || !strings.Contains(d.Message, "pin record cannot be read") {
		t.Errorf("the checkpoint of the damaged pin record: %+v", d)
	}
	if d := ix.Decide(ctx, cur+"/_metadata", verdict.OpUnlink); !d.Allow {
		t.Errorf("another checkpoint refused because one pin record is damaged: %+v", d)
	}
	if d := ix.Decide(ctx, pinned, verdict.OpUnlink); d.Reason != verdict.ReasonPinned || !strings.Contains(d.Message, "ckguard unpin") {
		t.Errorf("a readable pin beside the damaged record: %+v", d)
	}
	if s := ix.SharedPinsStatus(); !strings.Contains(s.Error, "damaged") {
		t.Errorf("status does not name the damaged record: %+v", s)
	}
	files, _ := filepath.Glob(filepath.Join(tr.Root, shared.Dir, shared.Version, shared.PinName(damaged)) + "*")
	if len(files) != 1 {
		t.Fatalf("the damaged record's file: %v", files)
	}
	if err := os.RemoveAll(files[0]); err != nil { // the operator moves it away
		t.Fatal(err)
	}
	syncIndex(t, ix)
	if d := ix.Decide(ctx, damaged, verdict.OpUnlink); strings.Contains(d.Message, "pin record") {
		t.Errorf("after the damaged record was moved away: %+v", d)
	}
	if s := ix.SharedPinsStatus(); s.Error != "" {
		t.Errorf("status after the record was moved away: %+v", s)
	}
}
