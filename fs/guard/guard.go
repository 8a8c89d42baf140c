package guard

import (
	"context"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Checker is implemented by the reference index (*refindex.Index) and by test fakes. Paths are store-relative
// keys ('/'-separated, no leading slash, "" = root).
type Checker interface {
	// Decide answers whether op may happen to path. For a directory (OpRmdir, OpRename of a directory) the
	// answer covers everything below it. Any internal error must come back as a refusal (fail closed).
	// seen, when given, is what the mount observed of path (Check.Observed): the decision judges that
	// object, not another look by path.
	Decide(ctx context.Context, path string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision
	// Deleted records that path was removed through the mount; deleting a _metadata retires its checkpoint.
	Deleted(ctx context.Context, path string) error
	// Written records that path was written and closed through the mount; a _metadata is parsed and
	// indexed before this returns, so the checkpoint it describes is protected at once.
	Written(ctx context.Context, path string) error
	// Renamed records a rename done through the mount (file or directory).
	Renamed(ctx context.Context, from, to string) error
	// Explain reports a path's state ("referenced", "protected-by-policy", "in-grace", "deletable") and the
	// checkpoints that reference it, for the user.ckguard.* extended attributes.
	Explain(ctx context.Context, path string) (state string, referencing []string, err error)
}
