package integration

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// incident builds one of the index issue's incident trees in a fresh store.
type incident struct {
	name  string
	build func(dir string, now time.Time, opts ...treegen.Options) (*treegen.Tree, error)
}

var mntIncidents = []incident{{"IncidentOne", treegen.IncidentOne}, {"IncidentTwo", treegen.IncidentTwo}}

// cleanup is an ops cleanup as people run it; dir is the job folder (purge) or the mount root (find).
type cleanup struct {
	name string
	run  func(t *testing.T, root, purge string) // root: mountpoint or store; purge: folder relative to root
	// minAge > 0: the tool deletes only files older than this (find -mtime +7); otherwise everything in purge.
	minAge time.Duration
}

var mntCleanups = []cleanup{
	{name: "rm-rf", run: func(t *testing.T, root, purge string) {
		mntRun(t, "", "rm", "-rf", filepath.Join(root, purge)) // exit status 1 expected: refusals
	}},
	{name: "find-mtime-delete", minAge: 8 * 24 * time.Hour, run: func(t *testing.T, root, purge string) {
		mntRun(t, "", "find", root, "-mtime", "+7", "-delete")
	}},
	{name: "shutil-rmtree", run: func(t *testing.T, root, purge string) {
		out, code := mntRun(t, "", "python3", "-c", "import shutil,sys; shutil.rmtree(sys.argv[1], ignore_errors=True)", filepath.Join(root, purge))
		if code != 0 {
			t.Fatalf("python3 shutil.rmtree: %s", out)
		}
	}},
	{name: "mv-cross-device", run: func(t *testing.T, root, purge string) {
		// /dev/shm is another filesystem: rename(2) fails with EXDEV and mv copies, then deletes the source.
		trash, err := os.MkdirTemp("/dev/shm", "ckguard-trash-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(trash) })
		mntRun(t, "", "mv", filepath.Join(root, purge), trash+"/")
	}},
}

// expectedAfter lists the store files that must remain after cl ran on tree t through the guard: the
// tree's own Survivors for whole-folder cleanups; for age-based ones, files younger than minAge plus what
// the checkpoints that stay live (young or protected _metadata) reference, plus protected _metadata.
func expectedAfter(tr *treegen.Tree, cl cleanup, pol treegen.Policy) []string {
	if cl.minAge == 0 {
		keep := map[string]bool{}
		for _, k := range tr.AllFiles() {
			if !strings.HasPrefix(k, tr.Purge+"/") {
				keep[k] = true
			}
		}
		for _, k := range tr.Survivors(tr.Purge, pol) {
			keep[k] = true
		}
		return setKeys(keep)
	}
	old := func(k string) bool { return tr.Now.Sub(tr.Files[k].ModTime) >= cl.minAge }
	prot := map[string]bool{}
	for _, k := range tr.ProtectedMetadata(pol) {
		prot[k] = true
	}
	keep := map[string]bool{}
	for _, k := range tr.AllFiles() {
		if !old(k) {
			keep[k] = true
		}
	}
	for k, c := range tr.Live {
		if old(k) && !prot[k] {
			continue // retired by the cleanup
		}
		keep[k] = true
		for _, r := range c.Refs {
			if _, ok := tr.Files[r]; ok {
				keep[r] = true
			}
		}
		for _, d := range c.Dirs {
			for _, f := range tr.AllFiles() {
				if strings.HasPrefix(f, d+"/") {
					keep[f] = true
				}
			}
		}
	}
	return setKeys(keep)
}

func setKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// verifyIndex opens the index (the mount must be stopped) and returns whether every live checkpoint is
// complete, with the broken ones; it also runs `ckguard verify` when that command is built.
func verifyIndex(t *testing.T, store, index string) (bool, string) {
	t.Helper()
	st, err := localstore.New(store)
	if err != nil {
		t.Fatal(err)
	}
	ix, err := refindex.Open(index, st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	defer ix.Close()
	ctx := context.Background()
	if err := ix.Sync(ctx); err != nil {
		t.Fatalf("index sync: %v", err)
	}
	v, err := ix.Verify(ctx)
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	var broken []string
	for _, b := range v.Broken {
		broken = append(broken, b.Metadata+" missing "+strings.Join(mntHead(b.Missing), ","))
	}
	return v.OK, strings.Join(broken, "; ")
}

// cliVerify runs `ckguard verify` (exit 0 = every live checkpoint complete); ran is false while the command is
// still the skeleton's placeholder.
func cliVerify(t *testing.T, store, index string) (ok bool, ran bool, out string) {
	out, code := mntRun(t, "", mntBinary(t), "verify", "--store", store, "--index", index)
	if strings.Contains(out, "not built yet") {
		return false, false, out
	}
	return code == 0, true, out
}

// TestMountIncidentCleanups runs each real cleanup tool once on each incident tree through the guard:
// exactly the files the tree's ground truth says survive remain, everything else is gone in one pass, and
// every live checkpoint is complete afterwards.
func TestMountIncidentCleanups(t *testing.T) {
	mntRequire(t)
	for _, inc := range mntIncidents {
		for _, cl := range mntCleanups {
			t.Run(inc.name+"/"+cl.name, func(t *testing.T) {
				dir := t.TempDir()
				store := filepath.Join(dir, "store")
				tr, err := inc.build(store, time.Now())
				if err != nil {
					t.Fatal(err)
				}
				p := mntStart(t, tr.Root, filepath.Join(dir, "index"))
				cl.run(t, p.mnt, tr.Purge)
				p.stop()
				want := expectedAfter(tr, cl, treegen.DefaultPolicy)
				mntSameSet(t, "store after "+cl.name+" through the guard", mntFiles(t, tr.Root), want)
				if ok, broken := verifyIndex(t, tr.Root, p.index); !ok {
					t.Errorf("live checkpoints broken after a guarded cleanup: %s", broken)
				}
				if ok, ran, out := cliVerify(t, tr.Root, p.index); !ran || !ok {
					t.Errorf("ckguard verify not green after a guarded cleanup:\n%s", out)
				}
				var refusals int
				for _, r := range p.auditRecords() {
					if r.Decision == "refuse" {
						refusals++
						if r.Reason == "" || r.Comm == "" || r.PID == 0 {
							t.Errorf("incomplete audit record %+v", r)
						}
					}
				}
				if refusals == 0 {
					t.Errorf("no refusal in the audit log; the incident tree has referenced files in the cleanup's way")
				}
			})
		}
	}
}

// TestMountIncidentControl is the incident itself: the same cleanup on the store without the guard breaks a
// live checkpoint, and verify says so.
func TestMountIncidentControl(t *testing.T) {
	mntRequire(t)
	for _, inc := range mntIncidents {
		t.Run(inc.name, func(t *testing.T) {
			dir := t.TempDir()
			tr, err := inc.build(filepath.Join(dir, "store"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			mntRun(t, "", "rm", "-rf", filepath.Join(tr.Root, tr.Purge))
			ok, broken := verifyIndex(t, tr.Root, filepath.Join(dir, "index"))
			if ok {
				t.Fatalf("verify green after an unguarded rm -rf of %s: the control does not reproduce the incident", tr.Purge)
			}
			t.Logf("unguarded: %s", broken)
			if ok, ran, out := cliVerify(t, tr.Root, filepath.Join(dir, "index")); !ran || ok {
				t.Errorf("ckguard verify not red after an unguarded cleanup:\n%s", out)
			} else {
				t.Logf("ckguard verify (unguarded control):\n%s", out)
			}
		})
	}
}
