package s3mount_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// gate holds the queue's rounds until released: a test acts between the decision and its application.
type gate struct {
	inner   deleteq.Rechecker
	mu      sync.Mutex
	held    chan struct{}
	entered chan struct{}
}

func (g *gate) Recheck(ctx context.Context, es []deleteq.Entry, apply func([]deleteq.Verdict)) {
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held != nil {
		select {
		case g.entered <- struct{}{}:
		default:
		}
		<-held
	}
	g.inner.Recheck(ctx, es, apply)
}

func (g *gate) hold() {
	g.mu.Lock()
	g.held, g.entered = make(chan struct{}), make(chan struct{}, 1)
	g.mu.Unlock()
}

func (g *gate) release() {
	g.mu.Lock()
	if g.held != nil {
		close(g.held)
		g.held = nil
	}
	g.mu.Unlock()
}

// queued mounts with the delete queue (its journal in a fresh directory) behind a gate.
func queued(t *testing.T, ck *guardtest.Checker) (*env, *gate, string) {
	g := &gate{}
	dir := t.TempDir()
	e := setup(t, ck, func(o *s3mount.Options) {
		o.DeleteQueueDir = dir
		s3mount.TuneQueue(o, func(qo *deleteq.Options) { g.inner = qo.Recheck; qo.Recheck = g })
	})
	t.Cleanup(g.release)
	return e, g, dir
}

// TestQueuedDeleteNamespace: while a deletion is queued (acknowledged, not applied) the name is gone from
// the mount: stat, readdir and open see nothing, the object is still in the bucket, the journal holds it;
// rmdir of its folder applies it and succeeds; a new file of the same name is created (the queued delete
// is applied first and does not touch the new object).
func TestQueuedDeleteNamespace(t *testing.T) {
	e, g, dir := queued(t, newChecker())
	for _, k := range []string{"job/shared/a", "job/shared/b", "job/shared/c", "job/x"} {
		e.put(t, k, "v-"+k)
	}
	names(t, e.path("job/shared")) // a listing, as rm -rf does first
	g.hold()
	for _, n := range []string{"a", "b", "c"} {
		if err := os.Remove(e.path("job/shared/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	if !e.exists(t, "job/shared/a") {
		t.Fatal("the queue applied a deletion while held")
	}
	if _, err := os.Stat(e.path("job/shared/a")); !os.IsNotExist(err) {
		t.Errorf("stat of a queued name: %v, want ENOENT", err)
	}
	if got := names(t, e.path("job/shared")); len(got) != 0 {
		t.Errorf("readdir shows queued names: %v", got)
	}
	if rp, err := deleteq.ReadJournal(dir); err != nil || len(rp.Pending) != 3 {
		t.Errorf("journal: %+v %v, want 3 pending", rp, err)
	}
	if st := e.m.QueueStats(); st.Pending != 3 || st.Oldest.IsZero() {
		t.Errorf("queue stats %+v, want 3 pending with an oldest time", st)
	}
	// A create of a queued name: the queued deletion goes first, the new object stays.
	done := make(chan error, 1)
	go func() { done <- os.WriteFile(e.path("job/shared/a"), []byte("new"), 0o644) }()
	<-g.entered
	g.release()
	if err := <-done; err != nil {
		t.Fatalf("create of a name whose deletion is queued: %v", err)
	}
	if b, err := os.ReadFile(e.path("job/shared/a")); err != nil || string(b) != "new" {
		t.Errorf("new file: %q %v", b, err)
	}
	if err := os.Remove(e.path("job/shared/a")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Rmdir(e.path("job/shared")); err != nil {
		t.Fatalf("rmdir of a folder whose children are queued: %v", err)
	}
	for _, k := range []string{"job/shared/a", "job/shared/b", "job/shared/c"} {
		if e.exists(t, k) {
			t.Errorf("%s still in the bucket after rmdir of its folder", k)
		}
	}
	if got := names(t, e.path("job")); !slices.Equal(got, []string{"x"}) {
		t.Errorf("job after rmdir: %v", got)
	}
}

// TestQueuedDeleteRefusedAtApply: a _metadata referencing a queued key appears (is indexed) between the
// decision and the application: the deletion is decided again at apply time, refused, the object kept and
// shown again; other queued keys are deleted.
func TestQueuedDeleteRefusedAtApply(t *testing.T) {
	ck := newChecker()
	e, g, _ := queued(t, ck)
	e.put(t, "job/shared/keep", "k")
	e.put(t, "job/shared/go", "g")
	names(t, e.path("job/shared"))
	g.hold()
	for _, n := range []string{"keep", "go"} {
		if err := os.Remove(e.path("job/shared/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	ck.Protect("job/shared/keep") // a new checkpoint references it now
	g.release()
	if err := syscall.Rmdir(e.path("job/shared")); err != syscall.ENOTEMPTY {
		t.Errorf("rmdir after the refusal at apply time: %v, want ENOTEMPTY (the kept object is there)", err)
	}
	if !e.exists(t, "job/shared/keep") {
		t.Fatal("a key referenced at apply time was deleted")
	}
	if e.exists(t, "job/shared/go") {
		t.Error("the unreferenced queued key was not deleted")
	}
	if got := names(t, e.path("job/shared")); !slices.Equal(got, []string{"keep"}) {
		t.Errorf("after the refusal: %v, want the kept object shown again", got)
	}
	if st := e.m.QueueStats(); st.Kept != 1 || st.Applied != 1 || st.Pending != 0 {
		t.Errorf("queue stats %+v, want 1 kept, 1 applied", st)
	}
}

// TestQueuedRmRf: rm -rf of 1,200 unreferenced and 3 referenced objects through a queued mount removes
// exactly the unreferenced ones and refuses the others; nothing is left pending.
func TestQueuedRmRf(t *testing.T) {
	ck := newChecker("job/shared/r0", "job/shared/r1", "job/chk-2/r2")
	e, _, _ := queued(t, ck)
	ctx := context.Background()
	for i := range 1200 {
		e.put(t, fmt.Sprintf("job/shared/f%04d", i), "x")
	}
	for _, k := range []string{"job/shared/r0", "job/shared/r1", "job/chk-2/r2"} {
		e.put(t, k, "r")
	}
	out, err := exec.Command("rm", "-rf", e.path("job")).CombinedOutput()
	if err == nil {
		t.Fatalf("rm -rf succeeded despite referenced files: %s", out)
	}
	t.Logf("rm: %s", out)
	if left := e.m.FlushDeletes(ctx); left != 0 {
		t.Fatalf("%d deletions still pending after a flush", left)
	}
	var left []string
	if err := e.c.Walk(ctx, "", func(o s3client.Object) error { left = append(left, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []string{"job/chk-2/r2", "job/shared/r0", "job/shared/r1"}
	if !slices.Equal(left, want) {
		t.Errorf("left in the bucket: %d keys %v, want %v", len(left), head(left), want)
	}
	if st := e.m.QueueStats(); st.Pending != 0 || st.Applied != 1200 {
		t.Errorf("queue stats %+v, want 1200 applied, none pending", st)
	}
}

func head(s []string) []string {
	if len(s) > 10 {
		return s[:10]
	}
	return s
}

// TestQueuedDeleteFaults: the queue meets a failing server (503 storms on DeleteObject, whole
// DeleteObjects requests failing, DeleteObjects answering per-key errors for keys it did not delete):
// every failed key is retried until applied, nothing referenced is deleted, rm -rf sees no error but the
// refusals.
func TestQueuedDeleteFaults(t *testing.T) {
	cases := []struct {
		name  string
		batch bool
		arm   func(p *s3server.Proxy)
	}{
		{"single, DeleteObject storm", false, func(p *s3server.Proxy) { p.FailNext("DeleteObject", 400, false) }},
		{"batch, per-key errors", true, func(p *s3server.Proxy) { p.FailDeleteKeys(300, nil) }},
		{"batch, storm and per-key errors", true, func(p *s3server.Proxy) {
			p.FailNext("DeleteObjects", 4, false)
			p.FailDeleteKeys(250, func(k string) bool { return strings.HasSuffix(k, "3") || strings.HasSuffix(k, "7") })
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			protected := []string{"job/chk-1/r", "job/shared/f0100", "job/shared/f0555"}
			dir := t.TempDir()
			e, p := setupProxied(t, func(o *s3mount.Options) {
				o.DeleteQueueDir, o.DeleteBatch = dir, c.batch
				s3mount.TuneQueue(o, func(qo *deleteq.Options) { qo.MaxBackoff = 50 * time.Millisecond })
			})
			for _, k := range protected {
				e.ck.Protect(k)
			}
			for i := range 600 {
				e.put(t, fmt.Sprintf("job/shared/f%04d", i), "x")
			}
			e.put(t, "job/chk-1/r", "r")
			c.arm(p)
			out, err := exec.Command("rm", "-rf", e.path("job")).CombinedOutput()
			if err == nil {
				t.Fatalf("rm -rf succeeded despite referenced files")
			}
			for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
				if !strings.Contains(line, "Operation not permitted") && !strings.Contains(line, "Directory not empty") {
					t.Errorf("rm: %s", line)
				}
			}
			fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
			defer cancel()
			if left := e.m.FlushDeletes(fctx); left != 0 {
				t.Fatalf("%d deletions pending after the flush", left)
			}
			var left []string
			if err := e.c.Walk(ctx, "", func(o s3client.Object) error { left = append(left, o.Key); return nil }); err != nil {
				t.Fatal(err)
			}
			slices.Sort(protected)
			if !slices.Equal(left, protected) {
				t.Errorf("left in the bucket: %d keys %v, want %v", len(left), head(left), protected)
			}
			st := e.m.QueueStats()
			if st.Failures == 0 || st.Applied != 600-2 {
				t.Errorf("queue stats %+v: want failures retried and 598 applied", st)
			}
			t.Logf("queue: %v; proxy ops %v", st, p.Ops())
		})
	}
}
