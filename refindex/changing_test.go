package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// changingStore is a real local store whose Open of a `_metadata` calls change(key) right after opening, before anything is read: the file is changed in place between
// the open's stat and the read, as a writer racing the sync would.
type changingStore struct {
	*localstore.Store
	change func(key string)
}

func (s *changingStore) Open(ctx context.Context, key string) (store.Reader, error) {
	r, err := s.Store.Open(ctx, key)
	if err == nil && flinklayout.IsMetadata(key) && s.change != nil {
		s.change(key)
	}
	return r, err
}

// rewriteInPlace replaces the content of the file at p, keeping its inode (O_TRUNC, then the write).
func rewriteInPlace(t *testing.T, p string, b []byte) {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Error(err)
		return
	}
	f.Write(b)
	f.Close()
}

// TestMetadataChangingWhileRead (issue 29, a `_metadata` changing while read): a live checkpoint's
// `_metadata` is changed in place after the sync opened it and before it read it. No reference of a
// read during which the file changed is used, and the change fails no sync (a user rewriting a file
// must not fail every sync, which refuses everything): shrunk (a short read, which used to fail the
// sync), rewritten with another checkpoint's content (the new content is what counts, read whole
// again), changing at every read (judged damaged after three reads, protecting nothing but itself;
// read again at the next sync once it stops).
func TestMetadataChangingWhileRead(t *testing.T) {
	ctx := context.Background()
	job := "flink/fedcba9876543210fedcba9876543210"
	for _, tc := range []struct {
		name string
		// change is called with the open count, the path of chk-79's _metadata and the bytes of
		// chk-78's and chk-79's.
		change func(t *testing.T, n int, p string, b78, b79 []byte)
		// want: "damaged" (unparseable, refusing nothing else) or "is78" (live with chk-78's
		// references: chk-79's private file unreferenced).
		want, msg string
	}{
		{"shrunk", func(t *testing.T, n int, p string, _, b79 []byte) {
			if n == 1 {
				rewriteInPlace(t, p, b79[:len(b79)/2])
			}
		}, "damaged", ""},
		{"rewritten", func(t *testing.T, n int, p string, b78, _ []byte) {
			if n == 1 {
				rewriteInPlace(t, p, b78)
			}
		}, "is78", ""},
		{"appended", func(t *testing.T, n int, p string, b78, b79 []byte) {
			if n == 1 {
				rewriteInPlace(t, p, append(append([]byte{}, b79...), b78...))
			}
		}, "", ""},
		{"always", func(t *testing.T, n int, p string, b78, b79 []byte) {
			if n%2 == 1 {
				rewriteInPlace(t, p, b78)
			} else {
				rewriteInPlace(t, p, b79)
			}
		}, "damaged", "changed while it was read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr, err := treegen.YoungOrphan(t.TempDir(), testNow)
			if err != nil {
				t.Fatal(err)
			}
			c78, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-78", ID: 78, Completed: testNow.Add(-3 * time.Hour), Private: []string{"p78"}})
			if err != nil {
				t.Fatal(err)
			}
			c79, err := tr.Checkpoint(treegen.Spec{Dir: job + "/chk-79", ID: 79, Completed: testNow.Add(-2 * time.Hour), Private: []string{"p79"}})
			if err != nil {
				t.Fatal(err)
			}
			b78, _ := os.ReadFile(filepath.Join(tr.Root, c78.Metadata))
			b79, _ := os.ReadFile(filepath.Join(tr.Root, c79.Metadata))
			p79 := filepath.Join(tr.Root, c79.Metadata)
			st := &changingStore{Store: localStore(t, tr.Root)}
			var opens atomic.Int32
			st.change = func(key string) {
				if key == c79.Metadata {
					tc.change(t, int(opens.Add(1)), p79, b78, b79)
				}
			}
			ix := openIndex(t, t.TempDir(), st)
			defer ix.Close()
			if err := ix.Sync(ctx); err != nil {
				t.Fatalf("sync with %s changing while read: %v", c79.Metadata, err)
			}
			cs, err := ix.Checkpoints(ctx, "")
			if err != nil {
				t.Fatal(err)
			}
			var bad *refindex.CheckpointInfo
			for i := range cs.Unparseable {
				if cs.Unparseable[i].Metadata == c79.Metadata {
					bad = &cs.Unparseable[i]
				}
			}
			private79 := job + "/chk-79/p79"
			switch tc.want {
			case "damaged":
				if bad == nil || !strings.Contains(bad.Error, tc.msg) {
					t.Fatalf("%s not judged damaged (%q): %+v", c79.Metadata, tc.msg, cs.Unparseable)
				}
				if d := ix.Decide(ctx, tr.Orphans(treegen.DefaultPolicy, 0)[0], verdict.OpUnlink); !d.Allow {
					t.Errorf("an unrelated old orphan with the damaged %s: %+v", c79.Metadata, d)
				}
			case "is78":
				if bad != nil {
					t.Fatalf("%s rewritten with a valid checkpoint judged bad: %+v", c79.Metadata, bad)
				}
				if d := ix.Decide(ctx, private79, verdict.OpUnlink); !d.Allow {
					t.Errorf("%s (referenced only by the old content of %s): %+v", private79, c79.Metadata, d)
				}
			default:
				// Whatever the new content is judged, it was judged whole: its record has its size.
			}
			if d := ix.Decide(ctx, c78.Refs[0], verdict.OpUnlink); d.Allow {
				t.Errorf("a file of the untouched chk-78: %+v", d)
			}
			// Once it stops changing, the next sync reads what is there: for the one judged damaged
			// after changing at every read, also with the size and time it was recorded with.
			st.change = nil
			if tc.name == "always" {
				cs, _ := ix.Checkpoints(ctx, "")
				var size int64
				var mtime time.Time
				for _, u := range cs.Unparseable {
					if u.Metadata == c79.Metadata {
						size, mtime = u.Size, u.Completed
					}
				}
				b := append([]byte{}, b79...)
				if int64(len(b)) != size {
					t.Fatalf("recorded size %d, not chk-79's %d (the loop ended on chk-79's content)", size, len(b))
				}
				rewriteInPlace(t, p79, b)
				os.Chtimes(p79, mtime, mtime)
			} else {
				rewriteInPlace(t, p79, b79)
				os.Chtimes(p79, testNow.Add(-time.Hour), testNow.Add(-time.Hour))
			}
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if d := ix.Decide(ctx, private79, verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
				t.Errorf("after it stopped changing, chk-79's private file: %+v", d)
			}
		})
	}
}
