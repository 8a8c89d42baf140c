package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// The quarantine's promise, that a deletion through the mount loses nothing, holds on every store: the
// tests below run over each backend of qBackends, which declares where the stores really differ.

// qBackend is a store the quarantine tests run over.
type qBackend struct {
	name string
	// setup makes a store holding the IncidentOne tree and returns it, mounted by nothing yet.
	setup func(t *testing.T) *qStore
}

// qStore is one store under test.
type qStore struct {
	tr   *treegen.Tree
	root string // the --store the mount and the CLI are given
	// storeArgs are the flags the mount and the CLI need to reach the store (an S3 endpoint).
	storeArgs []string
	// wrongPolicy are the mount flags of a wrong policy (no grace, no active window) with the
	// quarantine on.
	wrongPolicy []string
	// killArgs are the mount flags of the kill -9 test, whose leftovers put adds.
	killArgs []string
	// contents reads every file outside the quarantine area, beside the mount.
	contents func(t *testing.T) map[string]qFile
	// put adds an unreferenced file past grace under the killArgs policy.
	put func(t *testing.T, key string)
	// leftovers is how many files put adds before the kill -9, and killAfter after how many allowed
	// deletions the daemon is killed.
	leftovers, killAfter int
	// queued: deletions are acknowledged into a durable queue and staged in its rounds after rm
	// returns, so the area fills in the background, an acknowledged deletion can be both at its key
	// and staged until the replayed queue applies it, and stopping the mount drains the queue.
	// Otherwise a file is staged before its unlink returns.
	queued bool
	// mtimes: a restore gives files back with their modification times (S3 sets a new Last-Modified
	// on the copy back).
	mtimes bool
	// verify checks, once everything is restored, that every live checkpoint is whole.
	verify func(t *testing.T, p *mntProc)
}

var qBackends = []qBackend{qLocal, qS3, qS3Versioned}

var qLocal = qBackend{"local", func(t *testing.T) *qStore {
	mntRequire(t)
	tr, err := treegen.IncidentOne(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-40 * 24 * time.Hour)
	return &qStore{tr: tr, root: tr.Root,
		// The quarantine is on by default on a local store.
		wrongPolicy: []string{"--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false"},
		contents:    func(t *testing.T) map[string]qFile { return qSnapshot(t, tr.Root) },
		put: func(t *testing.T, key string) {
			if err := tr.Write(key, 16, old); err != nil {
				t.Fatal(err)
			}
		},
		leftovers: 6000, killAfter: 1500, mtimes: true,
		verify: func(t *testing.T, p *mntProc) {
			if out, code := p.cli("verify"); code != 0 {
				t.Fatalf("verify after restoring everything: exit %d\n%s", code, out)
			}
		},
	}
}}

var (
	qS3 = qBackend{"s3", func(t *testing.T) *qStore { return qS3Store(t, false) }}
	// On a versioned bucket the delete markers are the quarantine (s3quarantine.VersionedArea).
	qS3Versioned = qBackend{"s3-versioned", func(t *testing.T) *qStore { return qS3Store(t, true) }}
)

func qS3Store(t *testing.T, versioned bool) *qStore {
	e := s3StartWith(t, versioned)
	tr := e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	wrong := []string{"--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h"}
	return &qStore{tr: tr, root: s3Root, storeArgs: e.mountArgs(),
		wrongPolicy: e.mountArgs(wrong...),
		// An object put now is young: the kill -9 test deletes under the wrong policy.
		killArgs: e.mountArgs(wrong...),
		contents: func(t *testing.T) map[string]qFile { return s3Contents(t, c) },
		put: func(t *testing.T, key string) {
			if _, err := c.Put(context.Background(), key, strings.NewReader(key), int64(len(key)), s3client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		},
		leftovers: 1500, killAfter: 500, queued: true,
		verify: func(t *testing.T, p *mntProc) {
			p.stop()
			if ok, broken := e.verify(t, p.index); !ok {
				t.Errorf("live checkpoints broken after the restore: %s", broken)
			}
			if ok, ran, out := e.cliVerify(t, p.index); ran && !ok {
				t.Errorf("ckguard verify red after the restore:\n%s", out)
			}
		},
	}
}

// forEachQBackend runs test as a subtest over a fresh store of every backend.
func forEachQBackend(t *testing.T, test func(t *testing.T, s *qStore)) {
	for _, b := range qBackends {
		t.Run(b.name, func(t *testing.T) { test(t, b.setup(t)) })
	}
}

// qFile is what a test compares of a store file: content and mtime.
type qFile struct {
	data  string
	mtime time.Time
}

// qSnapshot reads every file of a local store outside the quarantine folder.
func qSnapshot(t *testing.T, root string) map[string]qFile {
	t.Helper()
	out := map[string]qFile{}
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && rel == store.QuarantineDir {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = qFile{string(b), fi.ModTime()}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// s3Contents reads every object below the prefix outside the quarantine area, straight from the server.
func s3Contents(t *testing.T, c *s3client.Client) map[string]qFile {
	t.Helper()
	out := map[string]qFile{}
	ctx := context.Background()
	err := c.Walk(ctx, "", func(o s3client.Object) error {
		if o.IsDir || store.InQuarantine(o.Key) {
			return nil
		}
		b := make([]byte, o.Size)
		n, err := c.ReadAt(ctx, o.Key, b, 0, "")
		if errors.Is(err, fs.ErrNotExist) {
			return nil // deleted (staged) by the mount between the listing and the read
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return err
		}
		out[o.Key] = qFile{string(b[:n]), o.ModTime}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// qcli runs `ckguard quarantine SUB` with the mount's --store and --index.
func qcli(p *mntProc, sub string, args ...string) (string, int) {
	p.t.Helper()
	full := append([]string{"quarantine", sub, "--store", p.store, "--index", p.index}, args...)
	return mntRun(p.t, "", mntBinary(p.t), full...)
}

// qListResult is `ckguard quarantine list --json` of the mount's store, with a mount or without one
// (storeArgs reach the store then).
// crashCopies counts the S3 crash copies among probs while not settled (a deletion killed between its
// copy and its delete leaves a copy of a file still at its path: reported as a problem, never an entry,
// it is one file both at its path and staged until the remount's replay finishes the deletion) and
// returns the other problems.
func crashCopies(probs []quarantine.Problem, settled bool) (int, []quarantine.Problem) {
	n := 0
	var rest []quarantine.Problem
	for _, pr := range probs {
		if !settled && strings.HasPrefix(pr.Detail, "crash copy:") {
			n++
		} else {
			rest = append(rest, pr)
		}
	}
	return n, rest
}

func qListResult(t *testing.T, p *mntProc, storeArgs ...string) quarantine.ListResult {
	t.Helper()
	out, code := qcli(p, "list", append([]string{"--json"}, storeArgs...)...)
	if code != 0 {
		t.Fatalf("quarantine list: exit %d (an object without its record?)\n%s", code, out)
	}
	var r quarantine.ListResult
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("quarantine list --json: %v\n%s", err, out)
	}
	return r
}

func qList(t *testing.T, p *mntProc) []quarantine.Entry { t.Helper(); return qListResult(t, p).Entries }

// waitEntries waits (bounded) until n entries are staged: with a delete queue rm returns once a
// deletion is acknowledged, the staging follows in the queue's rounds.
func waitEntries(t *testing.T, p *mntProc, n int) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		got := len(qList(t, p))
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d entries in quarantine after 2 minutes, want %d", got, n)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// wipeWithWrongPolicy mounts s with a wrong policy (no grace, no active window) and the quarantine on,
// and lets rm -rf through the mount take every job: the live job first (its checkpoints retire, so
// nothing protects the old job's SSTs any more), then everything. mounted, when set, runs on the
// mount before the first rm. It returns the mount, the store's files before, and the entries staged,
// one for each of them.
func wipeWithWrongPolicy(t *testing.T, s *qStore, mounted func(*mntProc)) (*mntProc, map[string]qFile, []quarantine.Entry) {
	t.Helper()
	before := s.contents(t)
	p := mntStart(t, s.root, filepath.Join(t.TempDir(), "index"), s.wrongPolicy...)
	if mounted != nil {
		mounted(p)
	}
	for _, d := range []string{"flink-checkpoints/" + treegen.IncidentOneNewJob, "flink-checkpoints"} {
		if out, code := mntRun(t, "", "rm", "-rf", p.m(d)); code != 0 {
			t.Fatalf("rm -rf %s through the mount: exit %d\n%s", d, code, out)
		}
	}
	if s.queued {
		waitEntries(t, p, len(before))
	}
	if left := s.contents(t); len(left) != 0 {
		t.Fatalf("the wrong policy should have let rm take everything; left: %v", left)
	}
	es := qList(t, p)
	if len(es) != len(before) {
		t.Fatalf("%d entries in quarantine for %d files deleted", len(es), len(before))
	}
	out, code := qcli(p, "purge")
	if code != 1 || !strings.Contains(out, "younger than the TTL") || !strings.Contains(out, "purged 0 entries") {
		t.Fatalf("purge before the TTL: exit %d, want 1 and every entry refused\n%s", code, out)
	}
	return p, before, es
}

// TestQuarantineRestoreAfterWrongPolicy: with a wrong policy rm -rf through the mount takes every job,
// checkpoints and all. With the quarantine nothing is lost: every file is staged in the area (neither
// listed nor reachable nor writable through the mount), a purge is refused (too young), and restoring
// everything gives back the store byte for byte (mtimes too where the store keeps them) with verify
// green.
func TestQuarantineRestoreAfterWrongPolicy(t *testing.T) {
	forEachQBackend(t, func(t *testing.T, s *qStore) {
		p, before, _ := wipeWithWrongPolicy(t, s, nil)
		if out, code := mntRun(t, "", "ls", "-a", p.mnt); strings.Contains(out, store.QuarantineDir) {
			t.Fatalf("the mount lists the quarantine area (exit %d):\n%s", code, out)
		}
		if out, code := mntRun(t, "", "stat", p.m(store.QuarantineDir)); code == 0 {
			t.Fatalf("the quarantine area is reachable through the mount:\n%s", out)
		}
		if out, code := mntRun(t, "", "touch", p.m(store.QuarantineDir+"/planted")); code == 0 {
			t.Fatalf("a user created a file in the quarantine area through the mount:\n%s", out)
		}
		if out, code := qcli(p, "restore", "--since", "1h"); code != 0 {
			t.Fatalf("restore --since 1h: exit %d\n%s", code, out)
		}
		if es := qList(t, p); len(es) != 0 {
			t.Errorf("%d entries left in quarantine", len(es))
		}
		qCompare(t, s, before, s.contents(t))
		s.verify(t, p)
	})
}

// qCompare fails t unless after holds every file of before, with its content (and mtime, where the
// store keeps it), and nothing else.
func qCompare(t *testing.T, s *qStore, before, after map[string]qFile) {
	t.Helper()
	for k, f := range before {
		g, ok := after[k]
		switch {
		case !ok:
			t.Errorf("%s not restored", k)
		case g.data != f.data:
			t.Errorf("%s restored with other content", k)
		case s.mtimes && !g.mtime.Equal(f.mtime):
			t.Errorf("%s restored with mtime %v, was %v", k, g.mtime, f.mtime)
		}
	}
	if len(after) != len(before) {
		t.Errorf("%d files after the restore, %d before", len(after), len(before))
	}
}

// TestQuarantineKill9DuringRm kills the daemon with SIGKILL while rm -rf runs through a mount with the
// quarantine on, then mounts again: no file is ever lost (at its path or staged), nor staged twice, no
// object in the area lacks its record, and none is both at its path and staged (at once where a file is
// staged before its unlink returns; with a delete queue once the replayed queue has applied what was
// acknowledged: a copy made just before the kill is completed or removed); rm -rf after the remount
// stages the rest and is refused the files the live job references.
func TestQuarantineKill9DuringRm(t *testing.T) {
	forEachQBackend(t, func(t *testing.T, s *qStore) {
		for i := range s.leftovers {
			s.put(t, fmt.Sprintf("%s/chk-100270/leftover-%05d", s.tr.Purge, i))
		}
		before := s.contents(t)
		p := mntStart(t, s.root, filepath.Join(t.TempDir(), "index"), s.killArgs...)
		rm := exec.Command("rm", "-rf", p.m(s.tr.Purge))
		var rmOut bytes.Buffer
		rm.Stdout, rm.Stderr = &rmOut, &rmOut
		if err := rm.Start(); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			recs, _ := os.ReadFile(p.audit)
			if strings.Count(string(recs), `"decision":"allow"`) > s.killAfter || time.Now().After(deadline) {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		p.kill9()
		_ = rm.Wait()

		// check fails t if a file is lost or staged twice, or (settled) both at its path and staged,
		// and returns how many are both.
		check := func(when string, settled bool) (both int) {
			t.Helper()
			now := s.contents(t)
			r := qListResult(t, p, s.storeArgs...)
			staged := map[string]int{}
			for _, e := range r.Entries {
				staged[e.Path]++
			}
			lost, dup := 0, 0
			for k := range before {
				_, there := now[k]
				switch {
				case there && staged[k] > 0:
					both++
				case !there && staged[k] == 0:
					lost++
				case staged[k] > 1:
					dup++
				}
			}
			copies, probs := crashCopies(r.Problems, settled)
			both += copies
			if lost+dup != 0 || len(probs) != 0 || (settled && both != 0) {
				t.Fatalf("%s: %d files lost, %d both at their path and staged, %d staged twice, problems %+v", when, lost, both, dup, probs)
			}
			t.Logf("%s: %d files at their path, %d staged, %d both", when, len(now), len(r.Entries), both)
			return both
		}
		check("after kill -9", !s.queued)
		p.start(s.killArgs...)
		// With a delete queue the remount replays the journal of acknowledged deletions; wait (bounded)
		// until it has applied them, losing nothing at any point.
		deadline = time.Now().Add(2 * time.Minute)
		for check("after the remount", !s.queued) != 0 {
			if time.Now().After(deadline) {
				t.Fatal("after the remount: files both at their path and staged after 2 minutes")
			}
			time.Sleep(500 * time.Millisecond)
		}
		// The live job still references some of the old job's shared SSTs: those are refused.
		if out, code := mntRun(t, "", "rm", "-rf", p.m(s.tr.Purge)); code != 1 || !strings.Contains(out, "Operation not permitted") {
			t.Fatalf("rm -rf after the remount: exit %d, want 1 (the referenced SSTs are refused)\n%s", code, out)
		}
		if s.queued {
			p.stop() // drains the queue
		}
		check("after rm -rf again", true)
	})
}
