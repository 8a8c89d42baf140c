package localhold

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/internal/loopfs"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// fakeIndex protects prot; Decide allows an unlink of anything else unless refuse names it. during,
// when set, runs in the middle of ProtectedKeys (a change through the mount after the pass's view).
type fakeIndex struct {
	prot   map[string]bool
	refuse map[string]bool
	during func()
}

func (f *fakeIndex) ProtectedKeys(_ context.Context, fn func(string, refindex.ProtectedKind) bool) error {
	var ks []string
	for k := range f.prot {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	for i, k := range ks {
		if i == 1 && f.during != nil {
			f.during()
		}
		if !fn(k, refindex.ProtectedObject) {
			break
		}
	}
	return nil
}

func (f *fakeIndex) Decide(_ context.Context, p string, _ verdict.Op, _ ...store.ObjectInfo) verdict.Decision {
	if f.prot[p] || f.refuse[p] {
		return verdict.Decision{Allow: false}
	}
	return verdict.Decision{Allow: true}
}

type fixture struct {
	t     *testing.T
	logs  *bytes.Buffer
	log   *slog.Logger
	root  string
	index string
	ix    *fakeIndex
	st    *localstore.Store
}

func newFixture(t *testing.T, files ...string) *fixture {
	t.Helper()
	fsRoot := loopfs.Ext4(t, loopfs.Options{Size: 16 << 20, Prefix: "ckguard-ext4-localhold-"})
	root := filepath.Join(fsRoot, "store")
	for _, k := range files {
		p := filepath.Join(root, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("data of "+k), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	st, err := localstore.New(root)
	if err != nil {
		t.Fatal(err)
	}
	logs := &bytes.Buffer{}
	f := &fixture{t: t, logs: logs, log: slog.New(slog.NewTextHandler(logs, nil)), root: root, index: filepath.Join(fsRoot, "index"), ix: &fakeIndex{prot: map[string]bool{}, refuse: map[string]bool{}}, st: st}
	t.Cleanup(func() { // nothing flagged may keep the image from going
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && fi.Mode().IsRegular() {
				if fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK, 0); err == nil {
					_, _ = setImmutable(fd, false)
					unix.Close(fd)
				}
			}
			return nil
		})
	})
	return f
}

func (f *fixture) holder() *hold.Engine {
	f.t.Helper()
	h, err := New(Options{Files: f.st, Index: f.ix, Dir: f.index, Mode: hold.ModeRequired, Logger: f.log})
	if err != nil {
		f.t.Fatal(err)
	}
	f.t.Cleanup(func() { h.Close() })
	return h
}

func (f *fixture) immutable(k string) bool {
	f.t.Helper()
	fl, err := os.Open(filepath.Join(f.root, filepath.FromSlash(k)))
	if err != nil {
		f.t.Fatal(err)
	}
	defer fl.Close()
	on, err := Immutable(fl)
	if err != nil {
		f.t.Fatal(err)
	}
	return on
}

func (f *fixture) want(flagged map[string]bool, keys ...string) {
	f.t.Helper()
	for _, k := range keys {
		if got := f.immutable(k); got != flagged[k] {
			f.t.Errorf("%s: immutable %v, want %v", k, got, flagged[k])
		}
	}
}

// TestPassFlagsAndReleases: a pass flags what the index protects and nothing else; a file no longer
// protected is released only when Decide allows its deletion; the status counts what is held.
func TestPassFlagsAndReleases(t *testing.T) {
	f := newFixture(t, "job/shared/a", "job/shared/b", "job/chk-1/_metadata", "job/garbage")
	h := f.holder()
	ctx := context.Background()
	f.ix.prot = map[string]bool{"job/shared/a": true, "job/shared/b": true, "job/chk-1/_metadata": true}
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	all := []string{"job/shared/a", "job/shared/b", "job/chk-1/_metadata", "job/garbage"}
	f.want(map[string]bool{"job/shared/a": true, "job/shared/b": true, "job/chk-1/_metadata": true}, all...)
	if err := os.Remove(filepath.Join(f.root, "job/shared/a")); err == nil || !strings.Contains(err.Error(), "operation not permitted") {
		t.Errorf("unlink of a flagged file beside the holder: %v, want EPERM", err)
	}
	wantBytes := int64(len("data of job/shared/a") + len("data of job/shared/b") + len("data of job/chk-1/_metadata"))
	if s := h.Status(); s.Held != 3 || !s.Active || s.HeldBytes != wantBytes {
		t.Errorf("status %+v, want 3 held, %d bytes", s, wantBytes)
	}
	// chk-1 retired: b and _metadata unprotected; b still refused by the guard's rules (grace, say).
	f.ix.prot = map[string]bool{"job/shared/a": true}
	f.ix.refuse = map[string]bool{"job/shared/b": true}
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	f.want(map[string]bool{"job/shared/a": true, "job/shared/b": true}, all...)
	if s := h.Status(); s.Held != 2 || s.Kept != 1 || s.HeldBytes != int64(len("data of job/shared/a")+len("data of job/shared/b")) {
		t.Errorf("status %+v, want 2 held, 1 kept by the rules", s)
	}
	f.ix.refuse = nil
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	f.want(map[string]bool{"job/shared/a": true}, all...)
	if err := os.Remove(filepath.Join(f.root, "job/shared/b")); err != nil {
		t.Errorf("unlink of a released file: %v", err)
	}
}

// TestBeforeChangeClears: the mount's own change of a flagged file finds it cleared; a file still
// protected is flagged again by the next pass. A change during a pass (after its view of the index)
// is not undone by that pass's flag: the file stays unflagged until the next pass.
func TestBeforeChangeClears(t *testing.T) {
	f := newFixture(t, "j/a", "j/b", "j/c")
	h := f.holder()
	ctx := context.Background()
	f.ix.prot = map[string]bool{"j/a": true, "j/b": true}
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	h.BeforeChange(verdict.OpUnlink, "j/a")
	if f.immutable("j/a") || h.Held("j/a") {
		t.Fatal("j/a still flagged after BeforeChange")
	}
	if err := os.Rename(filepath.Join(f.root, "j/a"), filepath.Join(f.root, "j/a2")); err != nil {
		t.Fatalf("the mount's change after BeforeChange: %v", err)
	}
	if err := os.Rename(filepath.Join(f.root, "j/a2"), filepath.Join(f.root, "j/a")); err != nil {
		t.Fatal(err)
	}
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if !f.immutable("j/a") {
		t.Error("j/a, still protected, not flagged again by the next pass")
	}
	// c becomes protected; the mount changes it after the pass read the index, before it flags.
	f.ix.prot["j/c"] = true
	f.ix.during = func() { h.BeforeChange(verdict.OpUnlink, "j/c") }
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if f.immutable("j/c") {
		t.Error("j/c flagged by a pass although the mount changed it after the pass's view")
	}
	f.ix.during = nil
	if err := h.Pass(ctx); err != nil {
		t.Fatal(err)
	}
	if !f.immutable("j/c") {
		t.Error("j/c not flagged by the next pass")
	}
}

// TestCrashLeavesNothingStuck: a ledger left by a killed mount (an intent whose flag was set, its
// answer never recorded; a held file) is trusted by the next holder: after one pass nothing that is
// no longer protected keeps the flag, and what is protected keeps it.
func TestCrashLeavesNothingStuck(t *testing.T) {
	f := newFixture(t, "j/intent", "j/held", "j/still")
	for _, k := range []string{"j/intent", "j/held", "j/still"} {
		fl, err := f.st.OpenInode(k)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := setImmutable(int(fl.Fd()), true); err != nil {
			t.Fatal(err)
		}
		fl.Close()
	}
	if err := os.MkdirAll(f.index, 0o700); err != nil {
		t.Fatal(err)
	}
	var lines []byte
	for _, r := range []map[string]any{{"op": "p", "key": "j/intent"}, {"op": "p", "key": "j/held"}, {"op": "h", "key": "j/held", "at": time.Now()}, {"op": "h", "key": "j/still"}} {
		b, _ := json.Marshal(r)
		lines = append(append(lines, b...), '\n')
	}
	lines = append(lines, []byte(`{"op":"h","key":"j/torn`)...) // the torn last line of a kill -9
	if err := os.WriteFile(filepath.Join(f.index, hold.LedgerName), lines, 0o600); err != nil {
		t.Fatal(err)
	}
	f.ix.prot = map[string]bool{"j/still": true}
	h := f.holder()
	if n := h.Ledger().Damaged(); n != 1 {
		t.Errorf("damaged lines %d, want 1 (the torn one)", n)
	}
	if err := h.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	f.want(map[string]bool{"j/still": true}, "j/intent", "j/held", "j/still")
	es, err := hold.ReadLedger(f.index)
	if err != nil || len(es) != 1 || es[0].Key != "j/still" {
		t.Errorf("ledger after the pass (as hold status --list reads it): %v, %v; want j/still only", es, err)
	}
}

// TestNoSymlinkNoFIFO: a symlink or FIFO at a protected key is neither followed nor waited for: the
// file a symlink points to keeps its flags, the pass does not hang on a FIFO, and both count as
// failed.
func TestNoSymlinkNoFIFO(t *testing.T) {
	f := newFixture(t, "j/target")
	if err := os.Symlink("target", filepath.Join(f.root, "j/link")); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(f.root, "j/fifo"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.ix.prot = map[string]bool{"j/link": true, "j/fifo": true}
	h := f.holder()
	done := make(chan error, 1)
	go func() { done <- h.Pass(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the pass hangs on a FIFO at a protected key")
	}
	if f.immutable("j/target") {
		t.Error("the symlink at a protected key was followed: its target is flagged")
	}
	if s := h.Status(); s.Held != 0 || s.Failed != 2 {
		t.Errorf("status %+v, want nothing held, 2 failed", s)
	}
	if err := h.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := h.Status(); s.Held != 0 || s.Failed != 2 {
		t.Errorf("status after a second pass %+v, want nothing held, 2 failed", s)
	}
	if n := strings.Count(f.logs.String(), "could not read a protected object"); n != 2 {
		t.Errorf("%d warnings for the two failing keys over two passes, want 2 (logged once, not at every pass):\n%s", n, f.logs.String())
	}
}

// TestProbe: the flag works on ext4 and is refused, with the reason, on ramfs.
func TestProbe(t *testing.T) {
	if err := Probe(loopfs.Ext4(t, loopfs.Options{Size: 16 << 20, Prefix: "ckguard-ext4-probe-"})); err != nil {
		t.Errorf("probe on ext4: %v", err)
	}
	err := Probe(loopfs.Ramfs(t, "ckguard-ext4-probe-ramfs-"))
	if err == nil || !strings.Contains(err.Error(), "has no immutable flag") {
		t.Errorf("probe on ramfs: %v, want the filesystem named as having no immutable flag", err)
	}
}

// BenchmarkFlagAndClear: the cost per file of a pass flagging newly referenced files (an open, two
// ioctls, the ledger lines; intents fsynced per batch) and of the mount's BeforeChange clearing one.
func BenchmarkFlagAndClear(b *testing.B) {
	const n = 2000
	files := make([]string, n)
	for i := range files {
		files[i] = "job/shared/" + strings.Repeat("0", 3) + string(rune('a'+i%26)) + "-" + time.Duration(i).String()
	}
	for range b.N {
		b.StopTimer()
		f := newFixtureB(b, files...)
		h, err := New(Options{Files: f.st, Index: f.ix, Dir: f.index, Mode: hold.ModeRequired})
		if err != nil {
			b.Fatal(err)
		}
		for _, k := range files {
			f.ix.prot[k] = true
		}
		b.StartTimer()
		t0 := time.Now()
		if err := h.Pass(context.Background()); err != nil {
			b.Fatal(err)
		}
		pass := time.Since(t0)
		t1 := time.Now()
		for _, k := range files {
			h.BeforeChange(verdict.OpUnlink, k)
		}
		clr := time.Since(t1)
		b.StopTimer()
		b.ReportMetric(float64(pass.Microseconds())/n, "µs/flag")
		b.ReportMetric(float64(clr.Microseconds())/n, "µs/clear")
		h.Close()
		b.StartTimer()
	}
}

// newFixtureB is newFixture for a benchmark.
func newFixtureB(b *testing.B, files ...string) *fixture {
	b.Helper()
	fsRoot := loopfs.Ext4(b, loopfs.Options{Size: 64 << 20, Prefix: "ckguard-ext4-localhold-bench-"})
	root := filepath.Join(fsRoot, "store")
	for _, k := range files {
		p := filepath.Join(root, filepath.FromSlash(k))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	st, err := localstore.New(root)
	if err != nil {
		b.Fatal(err)
	}
	return &fixture{root: root, index: filepath.Join(fsRoot, "index"), ix: &fakeIndex{prot: map[string]bool{}, refuse: map[string]bool{}}, st: st}
}
