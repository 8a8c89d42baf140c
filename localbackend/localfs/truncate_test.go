package localfs

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// TestTruncatedMetadataIndexed: a _metadata truncated through the mount by path (truncate(2), no open
// descriptor whose close would tell the index) is indexed again before the call returns, as the S3 mount
// does: the index must not keep judging by content the file no longer has.
func TestTruncatedMetadataIndexed(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/chk-1/_metadata", "meta")
	e.write(t, "job/chk-1/state", "state")
	for _, k := range []string{"job/chk-1/_metadata", "job/chk-1/state"} {
		if err := os.Truncate(filepath.Join(e.mnt, k), 1); err != nil {
			t.Fatalf("truncate %s: %v", k, err)
		}
	}
	calls := e.checker.CallLog()
	if !slices.Contains(calls, "written job/chk-1/_metadata") {
		t.Errorf("truncated _metadata not indexed: %v", calls)
	}
	if slices.Contains(calls, "written job/chk-1/state") {
		t.Errorf("a truncated file other than _metadata was indexed: %v", calls)
	}
}
