package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// A _metadata over the size limit (128 MiB) is not read at all: what it references cannot be judged, and
// from the job folder's owner (this test's user) every deletion is refused with a message naming it,
// its size and the limit. At the limit it is read: zeros are damaged (no Flink magic number) and refuse
// nothing else. Anyone who can create a file can make one as large as they like; parsing it would hold
// every reference in memory. The file is sparse, so the test writes nothing.
func TestMetadataOverSizeLimitFailsClosed(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	tr, err := treegen.YoungOrphan(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		size   int64
		closed bool
	}{{128 << 20, false}, {128<<20 + 1, true}} {
		big := "flink/huge/chk-1/_metadata"
		p := filepath.Join(tr.Root, filepath.FromSlash(big))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		// Zeros: at or below the limit the file is read and fails to parse as well, so what tells the two
		// apart is the message.
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Truncate(p, tc.size); err != nil {
			t.Fatal(err)
		}
		st, err := localstore.New(tr.Root)
		if err != nil {
			t.Fatal(err)
		}
		ix, err := refindex.Open(filepath.Join(t.TempDir(), "index"), st, refindex.DefaultPolicy(), refindex.WithPathMap(tr.Maps, tr.EntropyKey))
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		var other string
		for k := range tr.Files {
			other = k
			break
		}
		d := ix.Decide(ctx, other, verdict.OpUnlink)
		ix.Close()
		if !tc.closed {
			if d.Reason == verdict.ReasonUnparseable {
				t.Fatalf("%d-byte damaged _metadata: deletion decided %+v, want decided without it", tc.size, d)
			}
			continue
		}
		if d.Allow || d.Reason != verdict.ReasonUnparseable || !strings.Contains(d.Message, big) {
			t.Fatalf("%d-byte _metadata: deletion decided %+v, want refused as unparseable naming %s", tc.size, d, big)
		}
		if over := strings.Contains(d.Message, "134217728 bytes (128 MiB"); over != tc.closed {
			t.Errorf("%d-byte _metadata: message %q names the size limit: %v, want %v", tc.size, d.Message, over, tc.closed)
		}
	}
}
