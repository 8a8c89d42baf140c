package refindex

import (
	"errors"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"
)

// writer is what badger.Txn and badger.WriteBatch have in common.
type writer interface {
	Set(k, v []byte) error
	Delete(k []byte) error
}

// putEntry writes a checkpoint and its references.
func putEntry(w writer, e *entry, clearTombstones bool) error {
	if err := w.Set(ckKey(e.rec.Key), e.rec.marshal()); err != nil {
		return err
	}
	if err := w.Set(fwdKey(e.rec.Key), encodeRefs(e.refs)); err != nil {
		return err
	}
	for _, r := range e.refs {
		if err := w.Set(pairKeyFor(r, e.rec.Key), nil); err != nil {
			return err
		}
		if clearTombstones && r.Inside {
			if err := w.Delete(tombKey(r.Key)); err != nil {
				return err
			}
		}
	}
	return nil
}

// pairKeyFor is the key of the (object, checkpoint) pair r records: in the outside, directory or
// reverse table.
func pairKeyFor(r ref, meta string) []byte {
	switch {
	case !r.Inside:
		return pairKey(tblOutside, r.Key, meta)
	case r.Kind == RefDirectory:
		return pairKey(tblDir, r.Key, meta)
	}
	return pairKey(tblReverse, r.Key, meta)
}

// removeEntry deletes a checkpoint's records; references not in keep lose this checkpoint and get a
// tombstone (their last checkpoint was retired, so they are not in-flight files).
// The tombstone records the retired record's owner and completion: it lifts grace only from files
// that checkpoint could have owned (tombstoneLifts).
func removeEntry(w writer, rec *checkpointRecord, refs []ref, keep map[string]bool, now time.Time, dropRecord bool) error {
	meta := rec.Key
	tomb, inJob := encodeTombstone(now, rec, false), encodeTombstone(now, rec, rec.JobOwner)
	if dropRecord {
		if err := w.Delete(ckKey(meta)); err != nil {
			return err
		}
		if err := w.Delete(fwdKey(meta)); err != nil {
			return err
		}
	}
	for _, r := range refs {
		pk := pairKeyFor(r, meta)
		if keep[string(pk)] {
			continue
		}
		if err := w.Delete(pk); err != nil {
			return err
		}
		if r.Inside && r.Kind != RefDirectory {
			t := tomb
			if rec.Job == "" || strings.HasPrefix(r.Key, rec.Job+"/") {
				t = inJob
			}
			if err := w.Set(tombKey(r.Key), t); err != nil {
				return err
			}
		}
	}
	return nil
}

// readRefs reads the forward references of `_metadata` meta (none when it is not indexed).
func readRefs(txn *badger.Txn, meta string) ([]ref, error) {
	it, err := txn.Get(fwdKey(meta))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := it.ValueCopy(nil)
	if err != nil {
		return nil, err
	}
	return decodeRefs(v)
}
