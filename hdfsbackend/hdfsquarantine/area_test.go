package hdfsquarantine_test

import (
	"context"
	"encoding/base64"
	"errors"
	"io/fs"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

const root = "/flink/store"

var mtime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

func newStore(t *testing.T, files map[string]string) *hdfsfake.FS {
	t.Helper()
	f := hdfsfake.New("flink")
	if err := f.MkdirAll(context.Background(), root, 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range files {
		if err := f.Put(root+"/"+k, []byte(v), mtime); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func open(t *testing.T, f hdfsclient.FS, now func() time.Time) *hdfsquarantine.Area {
	t.Helper()
	a, err := hdfsquarantine.Open(context.Background(), f, root, now)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// exactlyOnce checks the area's invariant for key: the file with content want is at its key or an
// entry of the area, never both, never neither.
func exactlyOnce(t *testing.T, f *hdfsfake.FS, a *hdfsquarantine.Area, key, want string) {
	t.Helper()
	ctx := context.Background()
	inPlace := false
	if b, err := f.ReadFile(root + "/" + key); err == nil {
		inPlace = string(b) == want
	}
	es, err := a.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	staged := 0
	for _, e := range es {
		if e.Key() == key {
			staged++
			if b, err := f.ReadFile(a.EntryPath(e.ID)); err != nil || string(b) != want {
				t.Errorf("entry %s of %s holds %q (%v), want %q", e.ID, key, b, err, want)
			}
		}
	}
	if n := staged + map[bool]int{true: 1}[inPlace]; n != 1 {
		t.Errorf("%s: at its key %v, entries %d: want exactly one place", key, inPlace, staged)
	}
}

func TestStageRestorePurge(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"job/chk-1/a": "alpha", "job/chk-1/_metadata": "meta"})
	clock := mtime.Add(time.Hour)
	a := open(t, f, func() time.Time { return clock })
	d := quarantine.Decision{Op: "unlink", Reason: "allowed", UID: 1000}
	e, err := a.Stage(ctx, "job/chk-1/a", d)
	if err != nil {
		t.Fatal(err)
	}
	if e.Path != "job/chk-1/a" || e.Size != 5 || !e.ModTime.Equal(mtime) || !e.DeletedAt.Equal(clock) || e.Decision != d {
		t.Errorf("entry %+v", e)
	}
	if _, err := f.Stat(ctx, root+"/job/chk-1/a"); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("staged file still at its key: %v", err)
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 1 || len(probs) != 0 || es[0].ID != e.ID || !es[0].ModTime.Equal(mtime) {
		t.Fatalf("ListAll = %+v, %+v, %v", es, probs, err)
	}
	if got, ok, err := quarantine.Find(ctx, a, "job/chk-1/a"); err != nil || !ok || got.ID != e.ID {
		t.Errorf("Find = %+v %v %v", got, ok, err)
	}
	exactlyOnce(t, f, a, "job/chk-1/a", "alpha")

	// The folder is gone (rm -rf removed it): restore recreates it.
	if err := f.Remove(ctx, root+"/job/chk-1/_metadata"); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{root + "/job/chk-1", root + "/job"} {
		if err := f.Remove(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	got, err := a.Restore(ctx, e.ID)
	if err != nil || got.ID != e.ID {
		t.Fatalf("Restore = %+v, %v", got, err)
	}
	if b, err := f.ReadFile(root + "/job/chk-1/a"); err != nil || string(b) != "alpha" {
		t.Errorf("restored %q, %v", b, err)
	}
	if fi, err := f.Stat(ctx, root+"/job/chk-1/a"); err != nil || !fi.ModTime.Equal(mtime) {
		t.Errorf("restored mtime %v, %v; want %v", fi.ModTime, err, mtime)
	}
	if es, _ := a.List(ctx); len(es) != 0 {
		t.Errorf("entries after restore: %+v", es)
	}
	if n := len(filesBelow(f, a.Dir())); n != 0 {
		t.Errorf("%d files left in the area after restore: %v", n, filesBelow(f, a.Dir()))
	}

	// Purge: file and record go.
	e2, err := a.Stage(ctx, "job/chk-1/a", d)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Purge(ctx, e2.ID); err != nil {
		t.Fatal(err)
	}
	if n := filesBelow(f, a.Dir()); len(n) != 0 {
		t.Errorf("left in the area after purge: %v", n)
	}
	if _, err := a.Restore(ctx, e2.ID); !errors.Is(err, quarantine.ErrNoEntry) {
		t.Errorf("restore of a purged entry: %v, want ErrNoEntry", err)
	}
}

func filesBelow(f *hdfsfake.FS, dir string) []string {
	var out []string
	for _, k := range f.Files() {
		if strings.HasPrefix(k, dir+"/") {
			out = append(out, k)
		}
	}
	return out
}

func TestRestoreNeverReplaces(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"job/x": "old"})
	a := open(t, f, nil)
	e, err := a.Stage(ctx, "job/x", quarantine.Decision{Op: "unlink"})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Put(root+"/job/x", []byte("new"), mtime); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrOccupied) {
		t.Fatalf("restore onto a new file: %v, want ErrOccupied", err)
	}
	if b, _ := f.ReadFile(root + "/job/x"); string(b) != "new" {
		t.Errorf("the new file holds %q", b)
	}
	if es, _ := a.List(ctx); len(es) != 1 {
		t.Errorf("the entry left quarantine: %+v", es)
	}
}

func TestRefusesKeysOutsideTheStore(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"a": "x"})
	a := open(t, f, nil)
	for _, k := range []string{"", "../a", "/a", store.QuarantineDir, store.QuarantineDir + "/x", "a/../a"} {
		if _, err := a.Stage(ctx, k, quarantine.Decision{}); err == nil {
			t.Errorf("Stage(%q) allowed", k)
		}
	}
	if err := f.MkdirAll(ctx, root+"/dir", 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stage(ctx, "dir", quarantine.Decision{}); err == nil {
		t.Error("a directory was staged")
	}
	// A record naming a path outside the store (planted, or damaged) is never restored there.
	e, err := a.Stage(ctx, "a", quarantine.Decision{})
	if err != nil {
		t.Fatal(err)
	}
	rec := a.EntryPath(e.ID) + ".json"
	if err := f.Remove(ctx, rec); err != nil {
		t.Fatal(err)
	}
	bad := `{"id":"` + e.ID + `","path":"../../etc/x","size":1}`
	if err := f.Put(rec, []byte(bad), time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Restore(ctx, e.ID); err == nil {
		t.Error("restored to a path outside the store")
	}
	if _, err := f.Stat(ctx, "/flink/etc/x"); err == nil {
		t.Error("a file appeared outside the store")
	}
}

// TestCrashAtEveryStep stops each staging, restore and purge at every NameNode call it makes (the call
// fails, and nothing after it runs: what a kill -9 there leaves) and checks the file is at its key or
// an entry, never lost and never both; a record left behind is cleared by Tidy.
func TestCrashAtEveryStep(t *testing.T) {
	// A key short enough for a self-describing entry name, and one that needs a record file.
	crashAtEveryStep(t, "job/chk-1/f", false)
	crashAtEveryStep(t, "job/"+strings.Repeat("d", 200)+"/f", true)
}

func crashAtEveryStep(t *testing.T, key string, record bool) {
	ctx := context.Background()
	const body = "content"
	type step struct {
		op   string // the fake's op name
		name string // a substring of the path
	}
	stageSteps := []step{{"stat", "/f"}, {"rename", "/f"}}
	if record {
		stageSteps = append(stageSteps, step{"create", ".json"})
	}
	for _, s := range stageSteps {
		t.Run("stage-"+s.op, func(t *testing.T) {
			f := newStore(t, map[string]string{key: body})
			a := open(t, f, nil)
			f.SetFault(faultAt(s.op, s.name))
			if _, err := a.Stage(ctx, key, quarantine.Decision{Op: "unlink"}); err == nil {
				t.Fatal("staging succeeded through the fault")
			}
			f.SetFault(nil)
			exactlyOnce(t, f, a, key, body)
			if _, probs, _ := a.ListAll(ctx); len(probs) != 0 {
				t.Errorf("problems: %+v", probs)
			}
		})
	}
	restoreSteps := []step{{"stat", ""}, {"mkdirs", ""}, {"rename", ""}}
	if record {
		restoreSteps = append(restoreSteps, step{"delete", ".json"})
	}
	for _, s := range restoreSteps {
		t.Run("restore-"+s.op, func(t *testing.T) {
			f := newStore(t, map[string]string{key: body})
			clock := time.Now()
			a := open(t, f, func() time.Time { return clock })
			e, err := a.Stage(ctx, key, quarantine.Decision{Op: "unlink"})
			if err != nil {
				t.Fatal(err)
			}
			f.SetFault(faultAt(s.op, s.name))
			_, _ = a.Restore(ctx, e.ID)
			f.SetFault(nil)
			exactlyOnce(t, f, a, key, body)
			clock = clock.Add(time.Hour)
			if err := a.Tidy(ctx, 10*time.Minute); err != nil {
				t.Fatal(err)
			}
			exactlyOnce(t, f, a, key, body)
			if _, probs, _ := a.ListAll(ctx); len(probs) != 0 {
				t.Errorf("problems: %+v", probs)
			}
		})
	}
	if !record {
		return
	}
	t.Run("purge-record", func(t *testing.T) {
		f := newStore(t, map[string]string{key: body})
		clock := time.Now()
		a := open(t, f, func() time.Time { return clock })
		e, err := a.Stage(ctx, key, quarantine.Decision{Op: "unlink"})
		if err != nil {
			t.Fatal(err)
		}
		f.SetFault(faultAt("delete", ".json"))
		_ = a.Purge(ctx, e.ID)
		f.SetFault(nil)
		if es, probs, _ := a.ListAll(ctx); len(es) != 0 || len(probs) != 0 {
			t.Errorf("after a purge stopped before its record: %+v %+v", es, probs)
		}
		clock = clock.Add(time.Hour)
		if err := a.Tidy(ctx, 10*time.Minute); err != nil {
			t.Fatal(err)
		}
		if left := filesBelow(f, a.Dir()); len(left) != 0 {
			t.Errorf("left after Tidy: %v", left)
		}
	})
}

func faultAt(op, name string) func(string, string) error {
	return func(o, n string) error {
		if o == op && strings.Contains(n, name) {
			return hdfsclient.ErrUnavailable
		}
		return nil
	}
}

// lostAnswer renames and then fails, as a NameNode whose reply is lost.
type lostAnswer struct{ *hdfsfake.FS }

func (l lostAnswer) Rename(ctx context.Context, from, to string) error {
	if err := l.FS.Rename(ctx, from, to); err != nil {
		return err
	}
	return &hdfsclient.Error{Op: "rename", Path: from, Class: hdfsclient.ErrUnavailable, Err: hdfsclient.ErrUnavailable}
}

// TestLostRenameAnswerKeepsTheRecord: a staging whose rename happened though its answer was lost is an
// entry (its record is not dropped, which would leave the file in the area with its path unknown).
func TestLostRenameAnswerKeepsTheRecord(t *testing.T) {
	ctx := context.Background()
	for _, k := range []string{"k", strings.Repeat("k", 250)} { // a self-describing name, a record file
		f := newStore(t, map[string]string{k: "v"})
		a := open(t, lostAnswer{f}, nil)
		if _, err := a.Stage(ctx, k, quarantine.Decision{Op: "unlink"}); err != nil {
			t.Fatalf("Stage: %v", err)
		}
		exactlyOnce(t, f, a, k, "v")
	}
}

func TestProblemsNeverPurged(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, nil)
	clock := time.Now()
	a := open(t, f, func() time.Time { return clock })
	id := "0000000000000000001-0123456789abcdef"
	// A file without a record, a file with a garbage record, a garbage record alone.
	for name, body := range map[string]string{id: "orphan", "x": "data", "x.json": "{", "y.json": "not json"} {
		if err := f.Put(a.Dir()+"/"+name, []byte(body), mtime); err != nil {
			t.Fatal(err)
		}
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 0 || len(probs) != 2 {
		t.Fatalf("ListAll = %+v, %+v, %v; want two problems", es, probs, err)
	}
	r, err := quarantine.PurgeExpired(ctx, a, nil, time.Second, clock.Add(1000*time.Hour), nil)
	if err != nil || len(r.Purged) != 0 {
		t.Fatalf("purge = %+v, %v", r, err)
	}
	for _, n := range []string{id, "x"} {
		if _, err := f.Stat(ctx, a.Dir()+"/"+n); err != nil {
			t.Errorf("%s gone: %v", n, err)
		}
	}
}

func TestOpenRefusesAFileInItsPlace(t *testing.T) {
	f := newStore(t, map[string]string{store.QuarantineDir: "x"})
	if _, err := hdfsquarantine.Open(context.Background(), f, root, nil); err == nil {
		t.Fatal("opened a file as the quarantine folder")
	}
}

// TestEntryNames: a short key's entry is the staged file alone, its name recording the key, the change
// and who made it; a long key's has its record file; both list, restore and purge alike.
func TestEntryNames(t *testing.T) {
	ctx := context.Background()
	long := "job/" + strings.Repeat("x", 250) + "/f"
	odd := "job/ä b~c\xff/f"
	f := newStore(t, map[string]string{"job/a": "a", long: "long", odd: "odd"})
	a := open(t, f, nil)
	d := quarantine.Decision{Op: "truncate", Reason: "allowed", UID: 1001, GID: 1002, PID: 4242, Comm: "rm ~x/"}
	for _, k := range []string{"job/a", long, odd} {
		e, err := a.Stage(ctx, k, d)
		if err != nil {
			t.Fatal(err)
		}
		_, rerr := f.Stat(ctx, a.EntryPath(e.ID)+".json")
		if hasRecord := rerr == nil; hasRecord != (k == long) {
			t.Errorf("%s: record file %v", k, hasRecord)
		}
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 3 || len(probs) != 0 {
		t.Fatalf("ListAll = %+v %+v %v", es, probs, err)
	}
	for _, e := range es {
		if e.Decision != d || e.Key() == "" || e.DeletedAt.IsZero() {
			t.Errorf("entry %+v: decision or key lost", e)
		}
		b, _ := f.ReadFile(a.EntryPath(e.ID))
		if got, err := a.Restore(ctx, e.ID); err != nil || got.Key() != e.Key() {
			t.Fatalf("restore %s: %+v %v", e.Key(), got, err)
		}
		if r, _ := f.ReadFile(root + "/" + e.Key()); string(r) != string(b) {
			t.Errorf("%s restored as %q, was %q", e.Key(), r, b)
		}
	}
	if left := filesBelow(f, a.Dir()); len(left) != 0 {
		t.Errorf("left after restoring everything: %v", left)
	}
	// A planted self-describing name whose key leaves the store is never restored there; a malformed
	// one is a problem.
	evil := "0000000000000000001-0123456789abcdef~unlink~0~0~0~~" + b64("../../etc/x")
	for _, n := range []string{evil, "0000000000000000001-00~unlink~zz"} {
		if err := f.Put(a.Dir()+"/"+n, []byte("x"), mtime); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Restore(ctx, evil); err == nil {
		t.Error("restored to a path outside the store")
	}
	if _, probs, _ := a.ListAll(ctx); len(probs) != 1 {
		t.Errorf("problems %+v, want the malformed name", probs)
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
