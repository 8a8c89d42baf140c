package localquarantine

import (
	"context"
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// Find returns the newest entry staged from key (an object in the folder with its record), without
// listing the folder: the records are in memory, and only the candidates' objects are stat'ed.
func (l *Local) Find(ctx context.Context, key string) (quarantine.Entry, bool, error) {
	if err := l.lock(); err != nil {
		return quarantine.Entry{}, false, err
	}
	defer l.mu.RUnlock()
	l.recMu.Lock()
	var cands []quarantine.Entry
	for _, e := range l.recs {
		if e.Key() == key {
			cands = append(cands, e)
		}
	}
	for id, k := range l.named {
		if k == key {
			if e, ok, err := quarantine.ParseEntryName(id); ok && err == nil {
				cands = append(cands, e)
			}
		}
	}
	l.recMu.Unlock()
	quarantine.SortEntries(cands)
	for i := len(cands) - 1; i >= 0; i-- {
		var st unix.Stat_t
		if unix.Fstatat(l.dir, cands[i].ID, &st, unix.AT_SYMLINK_NOFOLLOW) == nil {
			if _, named, _ := quarantine.ParseEntryName(cands[i].ID); named {
				return fromStat(cands[i], &st), true, nil
			}
			return cands[i], true, nil
		}
	}
	return quarantine.Entry{}, false, ctx.Err()
}

// Space is the room of the store's filesystem (statfs on the store root's descriptor: the bytes an
// unprivileged writer may still use, as Flink's JobManager and TaskManagers write).
func (l *Local) Space(_ context.Context) (quarantine.Space, error) {
	if err := l.lock(); err != nil {
		return quarantine.Space{}, err
	}
	defer l.mu.RUnlock()
	return FDSpace(l.root)
}

// FDSpace is the room of the filesystem that holds the open file fd.
func FDSpace(fd int) (quarantine.Space, error) {
	var st unix.Statfs_t
	if err := unix.Fstatfs(fd, &st); err != nil {
		return quarantine.Space{}, fmt.Errorf("statfs of the store: %w", err)
	}
	bs := int64(st.Bsize)
	if st.Frsize > 0 {
		bs = int64(st.Frsize)
	}
	return quarantine.Space{Size: int64(st.Blocks) * bs, Free: int64(st.Bavail) * bs}, nil
}
