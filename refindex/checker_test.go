package refindex_test

import (
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex"
)

// The index is itself the Checker guarded filesystems ask: no adapter between the two.
var _ guard.Checker = (*refindex.Index)(nil)
