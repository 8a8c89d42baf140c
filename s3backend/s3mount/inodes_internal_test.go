package s3mount

import (
	"log/slog"
	"testing"
)

// TestInodesNeverShareALiveNumber: keys whose hashes collide get distinct numbers while both are live; a
// key keeps its number while its node is live and gets it again once forgotten; a retired number (name
// removed or renamed away, the node still held) is not handed to a new object of that key; a file and a
// directory of the same key are different objects.
func TestInodesNeverShareALiveNumber(t *testing.T) {
	tab := newInodes(0, slog.Default())
	tab.hash = func(string) uint64 { return 7 } // every key collides
	a, b := &node{}, &node{}
	ia, _ := tab.assign("a", false, a)
	ib, _ := tab.assign("b", false, b)
	if ia == ib {
		t.Fatalf("two live keys share inode %d", ia)
	}
	if ia != 7 {
		t.Errorf("the first key got %d, want its hash 7", ia)
	}
	// A second node for the live key a (lookups of one name racing) shares a's number: one object.
	if got, _ := tab.assign("a", false, &node{}); got != ia {
		t.Errorf("a second node of a live key got %d, want %d", got, ia)
	}
	if got, _ := tab.assign("a", true, &node{}); got == ia || got == ib {
		t.Errorf("the directory a got %d, a file's number", got)
	}
	tab.retire(b) // b unlinked while the kernel holds it
	if got, _ := tab.assign("b", false, &node{}); got == ib {
		t.Errorf("a new object b got the number %d its removed predecessor still holds", got)
	}
	tab.rekey(a, "moved") // a renamed to moved
	if got, _ := tab.assign("a", false, &node{}); got == ia {
		t.Errorf("a new object a got %d, held by the node renamed to moved", got)
	}
	if got := tab.peek("moved", false); got != ia {
		t.Errorf("readdir would show moved as %d, stat as %d", got, ia)
	}

	tab2 := newInodes(0, slog.Default())
	x := &node{}
	ix, _ := tab2.assign("x", false, x)
	if ix != nextIno(inoOf("x")-1) {
		t.Errorf("x got %d, not its hash", ix)
	}
	tab2.forgot(x)
	if n := len(tab2.live); n != 0 {
		t.Errorf("%d slots after the only node forgot", n)
	}
	if got, _ := tab2.assign("x", false, &node{}); got != ix {
		t.Errorf("x looked up again got %d, had %d", got, ix)
	}
	if tab2.liveFiles() != 1 {
		t.Errorf("live files %d, want 1", tab2.liveFiles())
	}
}
