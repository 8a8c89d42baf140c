package quarantine

import (
	"context"
	"iter"
)

// Pairing is how one engine's listing pairs what is staged in its area with the records of it (Pair).
// S is what the engine's listing found of a staged object (a stat, a folder, an S3 listing's object).
type Pairing[S any] struct {
	// Named: a name in the area may be a self-describing entry (EntryName: the local and HDFS areas);
	// else every entry has a record (S3).
	Named bool
	// Record returns the record of entry id, staged as s; ok is false when there is none.
	Record func(s S, id string) (e Entry, ok bool, err error)
	// Complete returns the entry of s, e as its record (or name, when named) says, completed with what
	// the staged object says; ok false: s is no entry, and no problem either (the engine knows why: a
	// copy whose change never happened, say).
	Complete func(s S, e Entry, named bool) (entry Entry, ok bool)
	// Problem is the problem of s, which is no entry for the reason detail: it names where to inspect s.
	Problem func(s S, id, detail string) Problem
	// NoRecord is the detail of an object without a record ("": EntryOf's).
	NoRecord string
}

// Pair is the listing of an area: every staged object (staged yields each by the entry id its name
// stands for) paired with its record. An object with its record is an entry (Complete), one without a
// readable record is a problem (never purged); a record without its object is no entry, and Pair never
// sees it. The entries are oldest first (SortEntries). ctx is checked before every object and after its
// record is read, so a listing cancelled midway is an error, never a record taken for unreadable.
func Pair[S any](ctx context.Context, staged iter.Seq2[string, S], p Pairing[S]) ([]Entry, []Problem, error) {
	var es []Entry
	var probs []Problem
	for id, s := range staged {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		e, named, problem := p.entryOf(s, id)
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		if problem != "" {
			probs = append(probs, p.Problem(s, id, problem))
			continue
		}
		if e, ok := p.Complete(s, e, named); ok {
			es = append(es, e)
		}
	}
	SortEntries(es)
	return es, probs, nil
}

// entryOf is EntryOf for the object s staged as id, with the engine's records and texts.
func (p Pairing[S]) entryOf(s S, id string) (Entry, bool, string) {
	record := func(id string) (Entry, bool, error) { return p.Record(s, id) }
	var e Entry
	var named bool
	var problem string
	if p.Named {
		e, named, problem = EntryOf(id, record)
	} else {
		e, problem = recordEntry(id, record)
	}
	if problem == noRecord && p.NoRecord != "" {
		problem = p.NoRecord
	}
	return e, named, problem
}
