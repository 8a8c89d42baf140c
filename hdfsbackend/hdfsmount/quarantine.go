package hdfsmount

import (
	"context"
	"syscall"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// With a quarantine every change the guard allows that would destroy a file's content stages the file
// instead: an unlink, a truncation to 0 and an open with O_TRUNC of a non-empty file (HDFS rewrites a
// file by recreating it; the old one is moved into the area first, then the empty file is created).
// Under the enforcer's lock the change is one rename into the area (the entry's name records the key;
// a key too long for that gets a record file, written before the decision, outside the lock, and
// dropped again when the change is refused). Quarantine takes the
// place of the HDFS trash: nothing is moved to .Trash while the mount stages.

// staging is one change's staging: prepared before the decision, committed by its act.
type staging struct {
	p         *hdfsquarantine.Pending
	attempted bool
}

// prepare readies staging key (observed as fi) for the change op; nil without a quarantine or for an
// empty file (nothing to keep). The errno is the change's when a needed record cannot be written.
func (f *filesystem) prepare(ctx context.Context, op verdict.Op, key string, fi hdfsclient.FileInfo) (*staging, syscall.Errno) {
	if f.q == nil || fi.IsDir || (op != verdict.OpUnlink && fi.Size == 0) {
		return nil, 0
	}
	d := f.g.Staged(ctx, op.String(), quarantine.ReasonAllowed, "")
	p, err := f.q.Prepare(ctx, key, &fi, d)
	if err != nil {
		f.log.Error("quarantine: the file the change would delete could not be staged, so nothing was changed", "path", key, "change", op.String(), "err", err)
		return nil, errnoOf(err)
	}
	return &staging{p: p}, 0
}

// commit moves the file into the area (the act of the allowed change, under the enforcer's lock).
func (s *staging) commit(ctx context.Context) error {
	s.attempted = true
	_, err := s.p.Commit(ctx)
	return err
}

// done drops the record of a staging whose change was refused before its act (a commit that was tried
// has settled its record itself).
func (s *staging) done(ctx context.Context) {
	if s != nil && !s.attempted {
		s.p.Drop(context.WithoutCancel(ctx))
	}
}

// errnoOf is err's errno, EIO for an error that names none.
func errnoOf(err error) syscall.Errno {
	if e := hdfsclient.Errno(err); e != 0 {
		return e
	}
	return syscall.EIO
}

// StagingArea is the quarantine area the mount stages deletions in (nil without one).
func (m *Mounted) StagingArea() quarantine.Staging {
	if m.fsys.q == nil {
		return nil
	}
	return m.fsys.q
}
