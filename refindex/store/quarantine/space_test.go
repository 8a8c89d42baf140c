package quarantine

import (
	"context"
	"errors"
	"reflect"
	"sort"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/bytesize"
	"github.com/ckguard/ckguard/internal/duration"
)

// memArea is an in-memory Area for the choice of the early purge (the local folder's moves are tested
// in local_test.go).
type memArea struct {
	es      []Entry
	purged  []string
	failing map[string]bool
}

func (m *memArea) List(context.Context) ([]Entry, error) { return append([]Entry(nil), m.es...), nil }
func (m *memArea) ListAll(ctx context.Context) ([]Entry, []Problem, error) {
	es, err := m.List(ctx)
	return es, nil, err
}
func (m *memArea) Tidy(context.Context, time.Duration) error { return nil }
func (m *memArea) Restore(context.Context, string) (Entry, error) {
	return Entry{}, errors.New("not here")
}
func (m *memArea) Purge(_ context.Context, id string) error {
	if m.failing[id] {
		return errors.New("EIO")
	}
	for i, e := range m.es {
		if e.ID == id {
			m.es = append(m.es[:i], m.es[i+1:]...)
			m.purged = append(m.purged, id)
			return nil
		}
	}
	return ErrNoEntry
}

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// entries are five entries of 100 bytes, "a" the oldest, listed out of order.
func entries() []Entry {
	var es []Entry
	for _, id := range []string{"c", "a", "e", "b", "d"} {
		off := int(id[0] - 'a')
		es = append(es, Entry{ID: id, Path: "job/shared/" + id, Size: 100, DeletedAt: t0.Add(time.Duration(off) * time.Minute)})
	}
	return es
}

func TestBoundNeed(t *testing.T) {
	for _, tc := range []struct {
		name  string
		b     Bound
		q     int64
		sp    *Space
		want  int64
		zeroB bool
	}{
		{"no bound", Bound{}, 1 << 30, &Space{Size: 100, Free: 0}, 0, true},
		{"under max", Bound{MaxBytes: 500}, 400, nil, 0, false},
		{"over max", Bound{MaxBytes: 500}, 650, nil, 150, false},
		{"min free bytes short", Bound{MinFree: bytesize.Bound{Bytes: 300}}, 1000, &Space{Size: 10000, Free: 120}, 180, false},
		{"min free percent short", Bound{MinFree: bytesize.Bound{Percent: 10}}, 1000, &Space{Size: 10000, Free: 400}, 600, false},
		{"min free met", Bound{MinFree: bytesize.Bound{Percent: 10}}, 1000, &Space{Size: 10000, Free: 1000}, 0, false},
		{"min free without a filesystem (S3)", Bound{MinFree: bytesize.Bound{Percent: 10}}, 1000, nil, 0, false},
		{"the larger need wins", Bound{MaxBytes: 900, MinFree: bytesize.Bound{Bytes: 500}}, 1000, &Space{Size: 10000, Free: 200}, 300, false},
		{"more than the whole quarantine", Bound{MinFree: bytesize.Bound{Bytes: 5000}}, 1000, &Space{Size: 10000, Free: 0}, 5000, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.b.Need(tc.q, tc.sp); got != tc.want {
				t.Errorf("Need = %d, want %d", got, tc.want)
			}
			if tc.b.IsZero() != tc.zeroB {
				t.Errorf("IsZero = %v", tc.b.IsZero())
			}
		})
	}
}

// TestPurgeOldest: the early purge takes the oldest entries first, stops as soon as enough is freed,
// never takes an entry a live checkpoint references again (or one the index cannot answer for), and
// goes on past an entry that fails.
func TestPurgeOldest(t *testing.T) {
	for _, tc := range []struct {
		name       string
		need       int64
		referenced map[string]bool
		indexDown  map[string]bool
		failing    map[string]bool
		wantPurged []string
		wantKept   []string
	}{
		{"nothing needed", 0, nil, nil, nil, nil, nil},
		{"one entry", 1, nil, nil, nil, []string{"a"}, nil},
		{"exactly two", 200, nil, nil, nil, []string{"a", "b"}, nil},
		{"a byte more than two", 201, nil, nil, nil, []string{"a", "b", "c"}, nil},
		{"more than all", 10000, nil, nil, nil, []string{"a", "b", "c", "d", "e"}, nil},
		{"referenced again is skipped", 200, map[string]bool{"job/shared/a": true}, nil, nil, []string{"b", "c"}, []string{"a"}},
		{"index cannot answer: kept", 100, nil, map[string]bool{"job/shared/a": true}, nil, []string{"b"}, []string{"a"}},
		{"a failing purge does not stop the rest", 200, nil, nil, map[string]bool{"b": true}, []string{"a", "c"}, []string{"b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &memArea{es: entries(), failing: tc.failing}
			ref := func(_ context.Context, key string) (bool, error) {
				if tc.indexDown[key] {
					return false, errors.New("index closed")
				}
				return tc.referenced[key], nil
			}
			r, err := PurgeOldest(context.Background(), a, a.es, tc.need, ref)
			if err != nil {
				t.Fatal(err)
			}
			var got, kept []string
			for _, e := range r.Purged {
				got = append(got, e.ID)
			}
			for _, k := range r.Kept {
				kept = append(kept, k.Entry.ID)
			}
			if !reflect.DeepEqual(got, tc.wantPurged) || !reflect.DeepEqual(a.purged, tc.wantPurged) {
				t.Errorf("purged %v (area: %v), want %v", got, a.purged, tc.wantPurged)
			}
			if !reflect.DeepEqual(kept, tc.wantKept) {
				t.Errorf("kept %v, want %v", kept, tc.wantKept)
			}
		})
	}
}

// TestPurgeWith: an operator's purge (--older-than, --all) replaces the TTL, still keeps what a live
// checkpoint references again, and tells Purged of each entry with its cause and requester.
func TestPurgeWith(t *testing.T) {
	now := t0.Add(10 * time.Minute) // a is 10 min old, e 6 min
	for _, tc := range []struct {
		name      string
		req       PurgeRequest
		want      []string
		wantCause PurgeCause
		wantErr   bool
	}{
		{"TTL: nothing is old enough", PurgeRequest{}, nil, "", false},
		{"older than 8m", PurgeRequest{OlderThan: duration.D(8 * time.Minute)}, []string{"a", "b", "c"}, CauseOperator, false},
		{"all, but b is referenced again", PurgeRequest{All: true}, []string{"a", "c", "d", "e"}, CauseOperator, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &memArea{es: entries()}
			var told []string
			by := Decision{UID: 1000, PID: 42, Comm: "ckguard"}
			d := &Direct{Area: a, TTL: 24 * time.Hour, Now: func() time.Time { return now },
				Referenced: func(_ context.Context, key string) (bool, error) { return key == "job/shared/b" && tc.req.All, nil },
				Purged: func(_ context.Context, e Entry, c PurgeCause, gotBy Decision) {
					if c != tc.wantCause || gotBy != by {
						t.Errorf("entry %s: cause %q by %+v, want %q by %+v", e.ID, c, gotBy, tc.wantCause, by)
					}
					told = append(told, e.ID)
				}}
			tc.req.By = by
			r, err := d.PurgeWith(context.Background(), tc.req)
			if (err != nil) != tc.wantErr {
				t.Fatal(err)
			}
			var got []string
			for _, e := range r.Purged {
				got = append(got, e.ID)
			}
			sort.Strings(got)
			sort.Strings(told)
			if !reflect.DeepEqual(got, tc.want) || !reflect.DeepEqual(told, tc.want) {
				t.Errorf("purged %v, told %v, want %v", got, told, tc.want)
			}
		})
	}
}
