package quarantine

import (
	"context"
	"errors"
	"maps"
	"strings"
	"testing"
	"time"
)

// pairing is a Pairing over objects that are their sizes, with records from recs (an Entry with an
// empty ID stands for an unreadable record) and objects of size 0 dropped by Complete.
func pairing(named bool, recs map[string]Entry) Pairing[int64] {
	return Pairing[int64]{
		Named: named,
		Record: func(_ int64, id string) (Entry, bool, error) {
			e, ok := recs[id]
			if ok && e.ID == "" {
				return Entry{}, true, errors.New("record unreadable")
			}
			return e, ok, nil
		},
		Complete: func(size int64, e Entry, _ bool) (Entry, bool) {
			e.Size = size
			return e, size != 0
		},
		Problem: func(size int64, id, detail string) Problem {
			return Problem{ID: id, Size: size, Detail: detail + "; inspect " + id}
		},
	}
}

// TestPair: an object with its record (or a self-describing name) is an entry completed by the
// object, oldest first; one without a readable record is a problem naming where to inspect it; one
// the engine drops is neither; a record without its object is nothing.
func TestPair(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	older, newer := NewID(t0), NewID(t0.Add(time.Second))
	named := EntryName(Entry{ID: NewID(t0.Add(-time.Second)), Path: "job/a", Decision: Decision{Op: OpUnlink}}, 255)
	dropped, orphan, unreadable := NewID(t0), NewID(t0), NewID(t0)
	recs := map[string]Entry{
		newer:      {ID: newer, Path: "job/new", DeletedAt: t0.Add(time.Second)},
		older:      {ID: older, Path: "job/old", DeletedAt: t0},
		dropped:    {ID: dropped, Path: "job/dropped", DeletedAt: t0},
		unreadable: {},
		NewID(t0):  {Path: "job/record-without-object"},
	}
	staged := map[string]int64{newer: 3, older: 2, named: 1, dropped: 0, orphan: 5, unreadable: 6}
	es, probs, err := Pair(context.Background(), maps.All(staged), pairing(true, recs))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Key())
		if e.Size != staged[e.ID] {
			t.Errorf("entry %s has size %d, want its object's %d", e.ID, e.Size, staged[e.ID])
		}
	}
	if strings.Join(got, " ") != "job/a job/old job/new" {
		t.Errorf("entries %v, want the named, old and new ones, oldest first", got)
	}
	want := map[string]string{orphan: noRecord + "; inspect " + orphan, unreadable: "record unreadable; inspect " + unreadable}
	if len(probs) != len(want) {
		t.Fatalf("problems %+v, want %v", probs, want)
	}
	for _, p := range probs {
		if p.Detail != want[p.ID] || p.Size != staged[p.ID] {
			t.Errorf("problem %+v, want detail %q and the object's size", p, want[p.ID])
		}
	}
}

// TestPairUnnamed: where names are not records (S3), a name with the separator is an object like any
// other (without its record, a problem, with the engine's text); a cancelled listing is an error.
func TestPairUnnamed(t *testing.T) {
	name := EntryName(Entry{ID: NewID(time.Now()), Path: "job/a", Decision: Decision{Op: OpUnlink}}, 255)
	p := pairing(false, nil)
	p.NoRecord = "no record here"
	es, probs, err := Pair(context.Background(), maps.All(map[string]int64{name: 1}), p)
	if err != nil || len(es) != 0 || len(probs) != 1 || probs[0].Detail != "no record here; inspect "+name {
		t.Fatalf("Pair = %+v %+v %v; want the name as an object without a record", es, probs, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := Pair(ctx, maps.All(map[string]int64{name: 1}), p); !errors.Is(err, context.Canceled) {
		t.Errorf("Pair of a cancelled listing: %v, want context.Canceled", err)
	}
}
