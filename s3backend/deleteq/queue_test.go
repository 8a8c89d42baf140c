package deleteq_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// bucket is an in-memory S3 side: objects by key with their ETag, and faults per key.
type bucket struct {
	mu      sync.Mutex
	objs    map[string]s3client.Object
	fail    map[string]int   // key -> how many more deletes of it fail with 503
	perm    map[string]error // key -> a permanent per-key error
	batches int
	singles int
	whole   int                            // how many more whole DeleteObjects requests fail
	who     map[string]quarantine.Decision // key -> the record a single delete of it carried
}

func newBucket(keys ...string) *bucket {
	b := &bucket{objs: map[string]s3client.Object{}, fail: map[string]int{}, perm: map[string]error{}, who: map[string]quarantine.Decision{}}
	for _, k := range keys {
		b.objs[k] = s3client.Object{Key: k, ETag: "e-" + k, ModTime: time.Unix(1000, 0)}
	}
	return b
}

var errUnavailable = &s3client.Error{Op: "DeleteObject", Class: s3client.ErrUnavailable, Err: errors.New("503 SlowDown")}

func (b *bucket) Head(_ context.Context, key string) (s3client.Object, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	o, ok := b.objs[key]
	if !ok {
		return s3client.Object{}, &s3client.Error{Op: "HeadObject", Class: fs.ErrNotExist, Err: errors.New("404")}
	}
	return o, nil
}

func (b *bucket) del(key, ifMatch string) error {
	if err := b.perm[key]; err != nil {
		return err
	}
	if b.fail[key] > 0 {
		b.fail[key]--
		return errUnavailable
	}
	o, ok := b.objs[key]
	if !ok {
		return nil
	}
	if ifMatch != "" && o.ETag != ifMatch {
		return &s3client.Error{Op: "DeleteObject", Class: s3client.ErrPrecondition, Err: errors.New("412")}
	}
	delete(b.objs, key)
	return nil
}

func (b *bucket) Delete(ctx context.Context, key, ifMatch string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.singles++
	b.who[key] = quarantine.DecisionFrom(ctx, "")
	return b.del(key, ifMatch)
}

func (b *bucket) DeleteBatch(_ context.Context, items []s3client.DeleteItem) ([]error, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.batches++
	if len(items) > s3client.MaxBatch {
		return nil, fmt.Errorf("batch of %d", len(items))
	}
	if b.whole > 0 {
		b.whole--
		return nil, errUnavailable
	}
	out := make([]error, len(items))
	for i, it := range items {
		out[i] = b.del(it.Key, it.IfMatch)
	}
	return out, nil
}

func (b *bucket) has(key string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.objs[key]
	return ok
}

// rechecker refuses the keys in keep (Keep) and, while later is set, everything (Later).
type rechecker struct {
	mu    sync.Mutex
	keep  map[string]bool
	later bool
	asked int
}

func (r *rechecker) Recheck(_ context.Context, es []deleteq.Entry, apply func([]deleteq.Verdict)) {
	r.mu.Lock()
	vs := make([]deleteq.Verdict, len(es))
	for i, e := range es {
		r.asked++
		switch {
		case r.later:
			vs[i] = deleteq.Later
		case r.keep[e.Key]:
			vs[i] = deleteq.Keep
		}
	}
	r.mu.Unlock()
	apply(vs)
}

func open(t *testing.T, dir string, b *bucket, r *rechecker, tune func(*deleteq.Options)) *deleteq.Queue {
	t.Helper()
	o := deleteq.Options{Dir: dir, Deleter: b, Recheck: r, Logger: quiet, MaxBackoff: time.Millisecond, VerifyAfter: time.Hour}
	if tune != nil {
		tune(&o)
	}
	q, err := deleteq.Open(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { q.Close() })
	return q
}

func obj(b *bucket, key string) s3client.Object {
	o, _ := b.Head(context.Background(), key)
	return o
}

// TestQueueOutcomes: per-key answers of the server, in batch and in single mode: a 503 (also a storm of
// them, and failures of whole DeleteObjects requests) is retried until applied; a replaced object (412)
// is skipped and stays; a permanent refusal (AccessDenied) is kept; a key gone already counts as applied;
// a key refused at apply time stays.
func TestQueueOutcomes(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			var keys []string
			for i := range 2500 {
				keys = append(keys, fmt.Sprintf("j/shared/f%04d", i))
			}
			b := newBucket(keys...)
			for i, k := range keys {
				if i%7 == 0 {
					b.fail[k] = 1 + i%4 // a storm: one in seven keys fails up to four times
				}
			}
			b.whole = 2
			b.perm["j/shared/f0003"] = &s3client.Error{Op: "DeleteObject", Class: fs.ErrPermission, Err: errors.New("AccessDenied")}
			r := &rechecker{keep: map[string]bool{"j/shared/f0005": true}}
			var mu sync.Mutex
			outs := map[string]deleteq.Outcome{}
			q := open(t, t.TempDir(), b, r, func(o *deleteq.Options) {
				o.Batch = batch
				o.Done = func(e deleteq.Entry, out deleteq.Outcome) { mu.Lock(); outs[e.Key] = out; mu.Unlock() }
			})
			replaced := "j/shared/f0001"
			gone := "j/shared/f0002"
			// The versions the decisions judged; then the bucket changes before the queue gets to them.
			decided := map[string]s3client.Object{}
			for _, k := range keys {
				decided[k] = obj(b, k)
			}
			b.mu.Lock()
			b.objs[replaced] = s3client.Object{Key: replaced, ETag: "new"}
			delete(b.objs, gone)
			b.mu.Unlock()
			for _, k := range keys {
				if !q.Add(decided[k], quarantine.Decision{}) {
					t.Fatalf("Add %s refused", k)
				}
			}
			if left := q.Flush(context.Background(), ""); left != 0 {
				t.Fatalf("%d pending after flush", left)
			}
			want := map[string]deleteq.Outcome{replaced: deleteq.Skipped, gone: deleteq.Applied,
				"j/shared/f0003": deleteq.Kept, "j/shared/f0005": deleteq.Kept}
			for _, k := range keys {
				w, special := want[k]
				if !special {
					w = deleteq.Applied
				}
				mu.Lock()
				got := outs[k]
				mu.Unlock()
				if got != w {
					t.Errorf("%s: %v, want %v", k, got, w)
				}
				if stays := w != deleteq.Applied; b.has(k) != stays {
					t.Errorf("%s in the bucket: %v, want %v", k, b.has(k), stays)
				}
			}
			st := q.Stats()
			if st.Pending != 0 || st.Failures == 0 || st.Applied != int64(len(keys)-3) || st.Kept != 2 || st.Skipped != 1 {
				t.Errorf("stats %+v", st)
			}
			if batch && b.singles != 0 || !batch && b.batches != 0 {
				t.Errorf("mode: %d batches, %d singles", b.batches, b.singles)
			}
		})
	}
}

// TestQueueLaterThenApply: while the index cannot decide (stale), entries stay pending and their names
// hidden; once it can, they are applied.
func TestQueueLaterThenApply(t *testing.T) {
	b := newBucket("a", "b")
	r := &rechecker{later: true}
	q := open(t, t.TempDir(), b, r, nil)
	q.Add(obj(b, "a"), quarantine.Decision{})
	q.Add(obj(b, "b"), quarantine.Decision{})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	q.Flush(ctx, "")
	if !q.Pending("a") || !b.has("a") || q.Stats().Failures == 0 {
		t.Fatalf("refused for the whole index: want pending and retried; stats %+v", q.Stats())
	}
	r.mu.Lock()
	r.later = false
	r.mu.Unlock()
	if left := q.Flush(context.Background(), ""); left != 0 || b.has("a") || b.has("b") {
		t.Fatalf("not applied once the index decides: left %d", left)
	}
}

// TestQueueBackpressure: a full queue refuses Add (the mount then deletes synchronously) and counts it.
func TestQueueBackpressure(t *testing.T) {
	b := newBucket("a", "b", "c")
	r := &rechecker{later: true}
	q := open(t, t.TempDir(), b, r, func(o *deleteq.Options) { o.Limit = 2 })
	if !q.Add(obj(b, "a"), quarantine.Decision{}) || !q.Add(obj(b, "b"), quarantine.Decision{}) {
		t.Fatal("Add refused below the limit")
	}
	if q.Add(obj(b, "c"), quarantine.Decision{}) {
		t.Fatal("Add accepted beyond the limit")
	}
	if q.Add(obj(b, "a"), quarantine.Decision{}) {
		t.Fatal("a second entry for a queued key accepted")
	}
	if st := q.Stats(); st.Fallbacks != 2 || st.Pending != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestQueueVerifiesOldEntries: an entry queued longer than VerifyAfter ago is HEADed first: an object
// rewritten with the same content (same ETag, new Last-Modified) is not deleted.
func TestQueueVerifiesOldEntries(t *testing.T) {
	b := newBucket("same", "untouched")
	now := time.Unix(5000, 0)
	var mu sync.Mutex
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	r := &rechecker{later: true}
	q := open(t, t.TempDir(), b, r, func(o *deleteq.Options) { o.Now = clock; o.VerifyAfter = time.Minute })
	q.Add(obj(b, "same"), quarantine.Decision{})
	q.Add(obj(b, "untouched"), quarantine.Decision{})
	b.mu.Lock()
	o := b.objs["same"]
	o.ModTime = o.ModTime.Add(time.Hour) // rewritten: same bytes, same ETag
	b.objs["same"] = o
	b.mu.Unlock()
	mu.Lock()
	now = now.Add(2 * time.Minute)
	mu.Unlock()
	r.mu.Lock()
	r.later = false
	r.mu.Unlock()
	q.Flush(context.Background(), "")
	if !b.has("same") {
		t.Error("an object rewritten after the decision (same ETag) was deleted")
	}
	if b.has("untouched") {
		t.Error("the unchanged old entry was not applied")
	}
}

// TestQueueReopen: entries acknowledged before Close are pending after Open, with their attempts and
// who asked for them: the delete applied after the reopen still carries the caller (a staging deleter
// records it with the staged object).
func TestQueueReopen(t *testing.T) {
	dir := t.TempDir()
	b := newBucket("a", "b")
	r := &rechecker{later: true}
	q := open(t, dir, b, r, nil)
	rm := quarantine.Decision{Op: quarantine.OpUnlink, Reason: quarantine.ReasonAllowed, PID: 4242, UID: 65534, GID: 65534, Comm: "rm"}
	q.Add(obj(b, "a"), rm)
	q.Add(obj(b, "b"), quarantine.Decision{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	q.Flush(ctx, "")
	cancel()
	q.Close()
	rp, err := deleteq.ReadJournal(dir)
	if err != nil || len(rp.Pending) != 2 || rp.Pending[0].Key != "a" || rp.Pending[0].Attempts == 0 || rp.Pending[0].Who != rm {
		t.Fatalf("journal after close: %+v %v", rp, err)
	}
	r2 := &rechecker{}
	q2 := open(t, dir, b, r2, nil)
	if !q2.Pending("a") {
		t.Fatal("not pending after reopen")
	}
	q2.Flush(context.Background(), "")
	if b.has("a") || b.has("b") {
		t.Error("not applied after reopen")
	}
	if b.who["a"] != rm || b.who["b"].Comm != "" {
		t.Errorf("the deletes applied after reopen carried %+v and %+v; want %+v and no caller", b.who["a"], b.who["b"], rm)
	}
	if fi, err := os.Stat(filepath.Join(dir, deleteq.JournalName)); err != nil || fi.Size() != 0 {
		t.Errorf("journal not compacted once empty: %v %v", fi.Size(), err)
	}
}

// TestParseJournal: what a journal says, whatever is in it.
func TestParseJournal(t *testing.T) {
	q := func(id int, key string) string {
		return fmt.Sprintf(`{"op":"q","id":%d,"key":%q,"etag":"e"}`, id, key)
	}
	cases := []struct {
		name    string
		in      string
		pending []string
		damaged int
		next    uint64
	}{
		{"empty", "", nil, 0, 0},
		{"queued", q(0, "a") + "\n" + q(1, "b") + "\n", []string{"a", "b"}, 0, 2},
		{"outcomes", q(0, "a") + "\n" + q(1, "b") + "\n" + q(2, "c") + "\n" + `{"op":"a","id":0}` + "\n" + `{"op":"k","id":1}` + "\n" + `{"op":"f","id":2,"err":"x"}` + "\n", []string{"c"}, 0, 3},
		{"torn last line", q(0, "a") + "\n" + `{"op":"q","id":1,"ke`, []string{"a"}, 1, 1},
		{"damage in the middle hides nothing after it", q(0, "a") + "\n\x00\x00garbage\n" + q(1, "b") + "\n", []string{"a", "b"}, 1, 2},
		{"unknown op", `{"op":"x","id":0}` + "\n" + q(1, "b"), []string{"b"}, 1, 2},
		{"queued without a key", `{"op":"q","id":0}` + "\n", nil, 1, 0},
		{"huge id", `{"op":"q","id":18446744073709551615,"key":"a"}` + "\n", nil, 1, 0},
		{"long line", q(0, strings.Repeat("k", 20<<10)) + "\n" + q(1, "b") + "\n", []string{"b"}, 1, 2},
		{"no final newline", q(0, "a"), []string{"a"}, 0, 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rp, err := deleteq.Parse(strings.NewReader(c.in))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range rp.Pending {
				got = append(got, e.Key)
			}
			if strings.Join(got, ",") != strings.Join(c.pending, ",") || rp.Damaged != c.damaged || rp.NextID != c.next {
				t.Errorf("pending %v damaged %d next %d; want %v %d %d", got, rp.Damaged, rp.NextID, c.pending, c.damaged, c.next)
			}
		})
	}
}

// FuzzParse: any bytes parse without panic or unbounded memory, and every pending entry has a key.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"op":"q","id":0,"key":"a","etag":"e"}` + "\n" + `{"op":"a","id":0}`))
	f.Add([]byte(`{"op":"f","id":3,"err":"x"}` + "\n\n\n{"))
	f.Add([]byte(strings.Repeat("x", 70<<10)))
	f.Fuzz(func(t *testing.T, b []byte) {
		rp, err := deleteq.Parse(strings.NewReader(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range rp.Pending {
			if e.Key == "" || e.ID >= rp.NextID {
				t.Fatalf("bad entry %+v (next %d)", e, rp.NextID)
			}
		}
	})
}

// markingBucket is a bucket that records, for every delete request, whether its context asked for a
// single attempt (s3client.OneAttempt).
type markingBucket struct {
	*bucket
	mu       sync.Mutex
	sent     int
	retrying int // requests whose context lets the client retry
}

func (m *markingBucket) mark(ctx context.Context) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sent++
	if !s3client.IsOneAttempt(ctx) {
		m.retrying++
	}
}

func (m *markingBucket) Delete(ctx context.Context, key, ifMatch string) error {
	m.mark(ctx)
	return m.bucket.Delete(ctx, key, ifMatch)
}

func (m *markingBucket) DeleteBatch(ctx context.Context, items []s3client.DeleteItem) ([]error, error) {
	m.mark(ctx)
	return m.bucket.DeleteBatch(ctx, items)
}

// TestApplySendsOnce: the deletes a round sends while the guard's lock is held (inside apply) each go
// out as a single attempt (s3client.OneAttempt), so the client's retry loop never runs under the lock;
// a failed one (503) is retried by a later round, after the entry was decided again.
func TestApplySendsOnce(t *testing.T) {
	for _, batch := range []bool{true, false} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			keys := []string{"j/shared/a", "j/shared/b", "j/shared/c"}
			b := &markingBucket{bucket: newBucket(keys...)}
			b.fail["j/shared/b"] = 2
			b.whole = 1
			r := &rechecker{}
			q := open(t, t.TempDir(), b.bucket, r, func(o *deleteq.Options) { o.Deleter, o.Batch = b, batch })
			for _, k := range keys {
				if !q.Add(obj(b.bucket, k), quarantine.Decision{}) {
					t.Fatalf("Add %s refused", k)
				}
			}
			if left := q.Flush(context.Background(), ""); left != 0 {
				t.Fatalf("%d pending after flush", left)
			}
			b.mu.Lock()
			sent, retrying := b.sent, b.retrying
			b.mu.Unlock()
			if retrying != 0 {
				t.Errorf("%d of %d delete requests sent under the guard's lock may be retried by the client", retrying, sent)
			}
			r.mu.Lock()
			asked := r.asked
			r.mu.Unlock()
			if st := q.Stats(); st.Applied != 3 || st.Failures == 0 || asked <= len(keys) {
				t.Errorf("stats %+v, %d decisions: want 3 applied after failed rounds, each retry decided again", st, asked)
			}
		})
	}
}
