package refindex_test

import (
	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex"
)

// The adapter must satisfy the contract guarded filesystems code against.
var _ guard.Checker = (*refindex.GuardChecker)(nil)
