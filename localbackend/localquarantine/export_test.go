package localquarantine

import "github.com/ckguard/ckguard/refindex/store/quarantine"

// SetNoRenameFlags makes l act as on a filesystem without renameat2 flags (older NFS).
func (l *Local) SetNoRenameFlags() { l.noRenameFlags = true }

// CrashMoveKey stages key as MoveKey does, stopped as a crash would stop it right before its step-th
// change to the store (quarantinetest.Store.Crash): a key whose entry fits a name is staged by the
// rename alone; a longer one has its record written first.
func (l *Local) CrashMoveKey(key string, d quarantine.Decision, step int) bool {
	now := l.now()
	e := quarantine.Entry{ID: quarantine.NewID(now), Path: key, DeletedAt: now.UTC(), Decision: d}
	changes := 1
	if quarantine.EntryName(e, l.nameMax) == "" {
		changes = 2
	}
	if step >= changes {
		return false
	}
	if step == 1 {
		if err := l.writeRecord(e); err != nil {
			panic(err)
		}
	}
	return true
}
