//go:build hdfs

package hdfsguardd_test

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
)

type hfile struct {
	data  string
	mtime time.Time
}

// storeContents reads every file of the store (outside the quarantine folder) with the Go client.
func storeContents(t *testing.T, uri string) map[string]hfile {
	t.Helper()
	ctx := context.Background()
	st, err := hdfscli.OpenStore(ctx, uri, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer st.FS().Close()
	out := map[string]hfile{}
	if err := st.Walk(ctx, "", func(oi store.ObjectInfo) error {
		if oi.IsDir {
			return nil
		}
		b, err := readHDFS(ctx, st.FS(), hdfsclient.Join(st.Dir(), oi.Path))
		if err != nil {
			return err
		}
		out[oi.Path] = hfile{b, oi.ModTime}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestQuarantineOnHDFS: a guard mount with --quarantine over a real NameNode that has a trash. With a
// wrong policy (no grace, no active window) rm -rf takes every job; every file goes into the store's
// quarantine folder (not the trash), and a purge before the TTL is refused. A restored `_metadata`
// is live at once: its files still in quarantine are reported by the loss check with the restore
// command. Restoring everything gives the store back byte for byte with its mtimes, verify green.
// Past the TTL (a fake clock) the background purge takes what no live checkpoint references.
func TestQuarantineOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{TrashInterval: time.Hour})
	tr, uri := incident(t, c)
	before := storeContents(t, uri)
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := guarddtest.NewClock(time.Now())
	pol := guarddtest.ReferencesOnly()
	index := filepath.Join(dir, "index")
	var ctlSock, auditLog string
	guarddtest.Start(t, guardd.Config{StoreDir: uri, IndexDir: index, Mountpoint: mnt, Policy: pol,
		SyncInterval: 200 * time.Millisecond, Quarantine: 24 * time.Hour, QuarantineNow: clk.Now,
		Ready: func(m *guardd.Mounted) { ctlSock, auditLog = m.ControlSocket, m.AuditLog }},
		func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) })

	newJob := "checkpoints/" + treegen.IncidentTwoNewJob
	for _, d := range []string{newJob, "checkpoints"} {
		if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, d)).CombinedOutput(); err != nil {
			t.Fatalf("rm -rf %s through the mount: %v\n%s", d, err, out)
		}
	}
	if left := storeContents(t, uri); len(left) != 0 {
		t.Fatalf("the wrong policy should have let rm take everything; left %d files", len(left))
	}
	if ents, err := os.ReadDir(mnt); err != nil || len(ents) != 0 {
		t.Errorf("the mount's root lists %v (%v); the quarantine folder must not show", ents, err)
	}
	cl, _, err := hdfscli.Dial(ctx, uri, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if _, err := cl.Stat(ctx, hdfsclient.TrashRoot(cl.User())); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the trash %s exists (%v): with --quarantine nothing goes there", hdfsclient.TrashRoot(cl.User()), err)
	}

	q, err := control.DialQuarantine(guardd.QuarantineSocket(ctlSock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	l, err := q.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Entries) != len(before) || len(l.Problems) != 0 {
		t.Fatalf("%d entries (problems %+v) for %d files deleted", len(l.Entries), l.Problems, len(before))
	}
	area := c.Root() + "/store/" + store.QuarantineDir
	for _, e := range l.Entries {
		b, err := readHDFS(ctx, cl, area+"/"+hdfsquarantine.EntryRel(e.ID))
		if err != nil || b != before[e.Path].data {
			t.Errorf("entry %s of %s: staged content differs (%v)", e.ID, e.Path, err)
		}
	}
	r, err := q.Purge(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || len(r.Kept) != len(before) || r.Kept[0].Reason != "young" {
		t.Fatalf("purge before the TTL: %d purged, %d kept (%+v)", len(r.Purged), len(r.Kept), r.Kept[:1])
	}

	// The newest checkpoint's _metadata alone: live again at once, its files reported as in quarantine.
	var meta quarantine.Entry
	for _, e := range l.Entries {
		if strings.HasPrefix(e.Path, newJob+"/") && strings.HasSuffix(e.Path, "/_metadata") && e.Path > meta.Path {
			meta = e
		}
	}
	if rr, err := q.Restore(ctx, []string{meta.ID}); err != nil || len(rr.Restored) != 1 {
		t.Fatalf("restore %s: %+v %v", meta.Path, rr, err)
	}
	want := "ckguard quarantine restore --store " + uri + " --index " + index + " "
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		b, _ := os.ReadFile(auditLog)
		if strings.Contains(string(b), "in quarantine since") && strings.Contains(string(b), want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no loss record naming the quarantine and %q within 90 s after restoring %s alone", want, meta.Path)
		}
	}

	var ids []string
	for _, e := range l.Entries {
		if e.ID != meta.ID {
			ids = append(ids, e.ID)
		}
	}
	if rr, err := q.Restore(ctx, ids); err != nil || len(rr.Restored) != len(ids) {
		t.Fatalf("restore of everything: %d restored, %+v, %v", len(rr.Restored), rr.Failed, err)
	}
	after := storeContents(t, uri)
	for k, f := range before {
		switch g, ok := after[k]; {
		case !ok:
			t.Errorf("%s not restored", k)
		case g.data != f.data:
			t.Errorf("%s restored with other content", k)
		case !g.mtime.Equal(f.mtime):
			t.Errorf("%s restored with mtime %v, was %v", k, g.mtime, f.mtime)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d files after the restore, %d before", len(after), len(before))
	}
	verifyOK(t, uri, t.TempDir(), true)

	// The old job again: what the live job references stays, the rest is staged; past the TTL the
	// background purge removes the staged files (and their records) for good.
	_ = exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).Run()
	if l, err = q.List(ctx); err != nil || len(l.Entries) == 0 {
		t.Fatalf("nothing staged by rm -rf of the old job: %+v %v", l, err)
	}
	staged := len(l.Entries)
	clk.Add(25 * time.Hour)
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		if l, err = q.List(ctx); err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d entries left 90 s after the TTL passed", len(l.Entries), staged)
		}
	}
	var left []string
	if err := cl.List(ctx, area, func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			left = append(left, fi.Name)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("left in the quarantine folder after the purge: %v", left)
	}
	survivors := tr.Survivors(tr.Purge, treegen.Policy{}) // the wrong policy the mount runs with
	if got := under(hdfsFiles(t, uri), tr.Purge); strings.Join(got, "\n") != strings.Join(survivors, "\n") {
		t.Errorf("left in %s:\n%s\nwant the referenced files:\n%s", tr.Purge, strings.Join(got, "\n"), strings.Join(survivors, "\n"))
	}
	verifyOK(t, uri, t.TempDir(), true)
}
