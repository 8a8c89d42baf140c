package s3mount_test

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/verdict"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
)

// TestDeletionDoesNotHoldUpWritten: while the S3 request of an allowed deletion is held at the proxy (a
// throttling server: each time the test lets it through, the answer is 503), the write of a _metadata
// elsewhere in the mount, which needs the enforcer's exclusive lock to be indexed, completes. The
// request is sent under the enforcer's shared lock once: every further attempt is a new round (queue)
// or a new call of the guard (synchronous unlink), decided again, the lock released in between. The
// old code let the S3 client retry under the lock, so the writer waited as long as the server failed.
// Cases: a queued delete (DeleteObject), a queued staging with --quarantine (its CopyObject into the
// area), and a synchronous unlink (no queue).
func TestDeletionDoesNotHoldUpWritten(t *testing.T) {
	cases := []struct {
		name       string
		queue      bool
		quarantine bool
		op         string
		// decided: how often the guard decided the deletion before its first request (queued: at the
		// unlink and again at apply time).
		decided int
	}{
		{"queued delete", true, false, "DeleteObject", 2},
		{"queued staging", true, true, "CopyObject", 2},
		{"synchronous unlink", false, false, "DeleteObject", 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e, p := setupProxied(t, func(o *s3mount.Options) {
				if tc.queue {
					o.DeleteQueueDir = t.TempDir()
				}
				if tc.quarantine {
					o.Quarantine = s3quarantine.New(o.Client, nil, false)
				}
			})
			const victim = "junk/a"
			e.put(t, victim, "garbage")
			e.put(t, "job/chk-1/state", "s") // the folder the _metadata is written into
			var mu sync.Mutex
			decisions := 0
			e.ck.SetDecideHook(func(key string, op verdict.Op) {
				if key == victim && op == verdict.OpUnlink {
					mu.Lock()
					decisions++
					mu.Unlock()
				}
			})
			h := p.Hold(tc.op, func(r *http.Request) bool {
				return strings.HasSuffix(r.URL.Path, "/"+victim) || tc.op == "CopyObject"
			})
			t.Cleanup(h.Release)
			// A failure bound only: the test waits on events, not on time.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			rmDone := make(chan error, 1)
			go func() { rmDone <- os.Remove(e.path(victim)) }()
			if err := h.Wait(ctx, 1); err != nil {
				t.Fatalf("the deletion's %s never reached the proxy: %v", tc.op, err)
			}
			writeDone := make(chan error, 1)
			go func() { writeDone <- os.WriteFile(e.path("job/chk-1/_metadata"), []byte("meta"), 0o644) }()
			for next := 1; ; {
				caught := make(chan error, 1)
				go func(n int) { caught <- h.Wait(ctx, n) }(next)
				select {
				case err := <-writeDone:
					if err != nil {
						t.Fatalf("write of a _metadata while the deletion's request is held: %v", err)
					}
				case err := <-caught:
					if err != nil {
						t.Fatalf("the write of a _metadata did not complete while the deletion's %s was held (%d requests caught): %v", tc.op, h.Arrived(), err)
					}
					arrived := h.Arrived()
					mu.Lock()
					d := decisions
					mu.Unlock()
					if want := arrived + tc.decided - 1; d < want {
						t.Fatalf("request %d of the deletion (%s) was sent after %d decisions, want %d: it was retried while the enforcer's lock was still held", arrived, tc.op, d, want)
					}
					t.Logf("request %d caught after %d decisions; answered 503", arrived, d)
					h.Fail()
					next = arrived + 1
					continue
				}
				break
			}
			if tc.queue {
				if st := e.m.QueueStats(); st.Pending != 1 {
					t.Errorf("queue %+v when the write completed, want the held deletion pending", st)
				}
			}
			h.Release()
			if err := <-rmDone; err != nil {
				if tc.queue || !errors.Is(err, syscall.EIO) {
					t.Fatalf("rm: %v", err)
				}
				// The synchronous unlink used up the client's attempts, every one answered 503, before
				// the write got through: EIO, nothing deleted; an rm now succeeds.
				if !e.exists(t, victim) {
					t.Fatalf("rm failed with EIO, yet %s is gone", victim)
				}
				if err := os.Remove(e.path(victim)); err != nil {
					t.Fatalf("rm after the hold ended: %v", err)
				}
			}
			if tc.queue {
				if left := e.m.FlushDeletes(ctx); left != 0 {
					t.Fatalf("%d deletions pending after the hold ended", left)
				}
			}
			if e.exists(t, victim) {
				t.Errorf("%s still in the bucket after the hold ended", victim)
			}
			if !e.exists(t, "job/chk-1/_metadata") {
				t.Errorf("the _metadata written is not in the bucket")
			}
		})
	}
}
