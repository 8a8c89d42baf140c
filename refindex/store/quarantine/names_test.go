package quarantine

import (
	"fmt"
	"regexp"
	"testing"
	"time"
)

// TestNewIDFormat: ids stay 19 zero-padded digits of the deletion time, a dash and 16 hex digits (names
// sort by time; IDTime reads the time back), distinct for one instant.
func TestNewIDFormat(t *testing.T) {
	form := regexp.MustCompile(`^[0-9]{19}-[0-9a-f]{16}$`)
	for _, tm := range []time.Time{time.Unix(0, 1), time.Date(2026, 12, 2, 3, 4, 5, 6, time.UTC), time.Unix(0, 1<<62)} {
		id := NewID(tm)
		if !form.MatchString(id) || id[:19] != fmt.Sprintf("%019d", tm.UnixNano()) || !IDTime(id).Equal(tm) {
			t.Errorf("NewID(%v) = %q (IDTime %v)", tm, id, IDTime(id))
		}
		if NewID(tm) == id {
			t.Errorf("two ids for %v are the same", tm)
		}
	}
}

// TestEntryNameRoundTrip: a self-describing name reads back as the entry it was made of, whatever bytes
// the key and comm hold, and a name over the limit is not made.
func TestEntryNameRoundTrip(t *testing.T) {
	e := Entry{ID: NewID(time.Unix(1, 0)), Path: "job/a ~b/\xff", Decision: Decision{Op: OpReplace, UID: 1, GID: 2, PID: 3, Comm: "rm ~/x"}}
	e.PathBytes = []byte(e.Path)
	n := EntryName(e, 255)
	got, ok, err := ParseEntryName(n)
	if !ok || err != nil || got.ID != n || got.Key() != e.Key() || got.Decision.Comm != e.Decision.Comm || got.Change() != OpReplace ||
		got.Decision.UID != 1 || got.Decision.GID != 2 || got.Decision.PID != 3 || !got.DeletedAt.Equal(time.Unix(1, 0)) {
		t.Fatalf("ParseEntryName(%q) = %+v %v %v", n, got, ok, err)
	}
	if EntryName(e, len(n)-1) != "" {
		t.Fatal("a name longer than the limit was made")
	}
	if EntryName(Entry{ID: e.ID, Path: "a"}, 255) != "" {
		t.Fatal("a name was made for an entry without a change")
	}
}
