package refindex

import (
	"errors"

	badger "github.com/dgraph-io/badger/v4"
)

// keyMountRules holds the mountpoint maps (pathnorm.Normalizer.MountRules) the index was last opened
// with. They are not part of the fingerprint: `ckguard index rebuild` (no mountpoint) and the mount
// (its mountpoint) share one index, and a mount used to rebuild a CLI-built index at every start
// (minutes to hours on a big bucket, longer than a service manager waits).
var keyMountRules = []byte("m/mountrules")

// adoptMountRules lets an index derived with other mountpoint maps be used as it is when that makes no
// difference: a mountpoint map only turns references that would otherwise be outside the store into
// store keys, so the index is still exact unless one of its outside references maps inside now (a
// checkpoint written through the mount, indexed without its map). Then the next sync rebuilds it, as for
// any changed mapping. An index opened with fewer maps than it was built with keeps protecting the keys
// they derived (it refuses more, never less); its next sync derives new checkpoints without them, and a
// later open with the maps again finds those outside references and rebuilds.
func (ix *Index) adoptMountRules(db *badger.DB) error {
	want := ix.norm.MountRules()
	stale := false
	err := db.View(func(txn *badger.Txn) error {
		if getString(txn, keyMountRules) == want {
			return errSame
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: []byte(tblOutside), PrefetchValues: false})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			uri, _ := splitPair(it.Item().Key(), tblOutside)
			if ix.norm.Absolute(uri).Inside {
				stale = true
				return nil
			}
		}
		return nil
	})
	if errors.Is(err, errSame) {
		return nil
	}
	if err != nil {
		return err
	}
	if stale {
		ix.log.Info("the index holds references through this mountpoint that it was built without; the next sync rebuilds it", "index", ix.dir)
		ix.mu.needRebuild = true
		return nil
	}
	return db.Update(func(txn *badger.Txn) error { return txn.Set(keyMountRules, []byte(want)) })
}

var errSame = errors.New("same mountpoint maps")
