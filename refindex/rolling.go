package refindex

import (
	"errors"

	badger "github.com/dgraph-io/badger/v4"
)

// Large changes under one sync epoch.
//
// badger bounds a transaction (about 20,000 changed references with the index's memtables), and a sync
// used to fall back to a rebuild above that: on S3 a full walk of the bucket and a re-read of every
// `_metadata`, for what is a normal minute of 50 jobs checkpointing. Instead, apply writes one change
// through a rollingTxn: when a transaction is full it is committed and the writes go on in a new one.
//
// Crash safety: the first transaction of every apply sets keySyncPending, the last one deletes it
// together with setting keyLastSync. A process killed between two of those commits leaves the marker
// on disk; Open then finds an index that is neither the old nor the new state and treats it like one
// derived with another path mapping: every decision is refused (the index says why) until the next
// sync, which rebuilds it from the store. A change that fits one transaction sets and deletes the
// marker in that same transaction (no trace). Within the process, decisions read the snapshot taken
// before the first commit until the last one, so they see the old state or the new, never a mix; and
// additions are written before removals, so even a reader of the disk between two commits (a walk
// with its own transaction) sees at least the protection of the new state.
var keySyncPending = []byte("m/syncpending")

// rollingTxn is a writer over successive badger transactions of one change.
type rollingTxn struct {
	db  *badger.DB
	txn *badger.Txn
	// writes counts the operations of the current transaction; maxWrites > 0 commits after that
	// many (tests spread small changes over several transactions).
	writes, maxWrites int
	// commits counts the transactions committed so far (before the last).
	commits int
}

func newRollingTxn(db *badger.DB, maxWrites int) (*rollingTxn, error) {
	r := &rollingTxn{db: db, txn: db.NewTransaction(true), maxWrites: maxWrites}
	if err := r.txn.Set(keySyncPending, nil); err != nil {
		r.txn.Discard()
		return nil, err
	}
	return r, nil
}

// roll commits the current transaction and starts the next.
func (r *rollingTxn) roll() error {
	if err := commitTxn(r.txn); err != nil {
		return errors.Join(errCommitFailed, err)
	}
	r.commits++
	r.txn = r.db.NewTransaction(true)
	r.writes = 0
	return nil
}

func (r *rollingTxn) do(op func(*badger.Txn) error) error {
	if r.maxWrites > 0 && r.writes >= r.maxWrites {
		if err := r.roll(); err != nil {
			return err
		}
	}
	err := op(r.txn)
	if errors.Is(err, badger.ErrTxnTooBig) {
		if err := r.roll(); err != nil {
			return err
		}
		err = op(r.txn)
	}
	if err == nil {
		r.writes++
	}
	return err
}

func (r *rollingTxn) Set(k, v []byte) error {
	return r.do(func(t *badger.Txn) error { return t.Set(k, v) })
}

func (r *rollingTxn) Delete(k []byte) error {
	return r.do(func(t *badger.Txn) error { return t.Delete(k) })
}

// finish commits the last transaction, which clears the marker.
func (r *rollingTxn) finish() error {
	if err := r.Delete(keySyncPending); err != nil {
		return err
	}
	if err := commitTxn(r.txn); err != nil {
		return errors.Join(errCommitFailed, err)
	}
	return nil
}

func (r *rollingTxn) discard() { r.txn.Discard() }
