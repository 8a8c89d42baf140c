package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	iofs "io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestE2ES3AHold is the first incident's scenario (B restores from A's checkpoint after A's folder
// was purged with `aws s3 rm --recursive` beside the mount) with real Flink writing s3a:// to
// versitygw, protected from outside the mount (issue 31). The control, the same rm without any
// guard making B's restore fail, is TestE2ES3A/…/unguarded.
//
//   - hold: an Object Lock bucket, the mount with --hold required. Once every object B references in
//     A's folder is held, the rm only puts delete markers; the loss check removes those of the
//     referenced objects (audited as hold-heal) so they read again within two syncs after the rm,
//     while A's garbage stays deleted; a task failure in B restores; verify is green.
//   - restore-lost: a versioned bucket, the mount without --hold. The rm deletes; the loss check
//     reports each object B references (audit loss-check/missing); `ckguard restore-lost` lists them
//     (a dry run that changes nothing), `--apply` brings each back from its version; B restores.
func TestE2ES3AHold(t *testing.T) {
	e2eRequire(t)
	for _, v := range flinkVersions() {
		for _, mode := range []string{"hold", "restore-lost"} {
			t.Run(v+"/"+mode, func(t *testing.T) {
				if !s3aFlinkVersions[v] {
					t.Skipf("the s3a Maven profile is verified with Flink 1.20 only (not %s)", v)
				}
				srv := s3server.StartVersioned(t)
				var bucket string
				if mode == "hold" {
					bucket = srv.ObjectLockBucket(t, "checkpoints")
				} else {
					bucket = srv.VersionedBucket(t, "checkpoints")
				}
				s3aOutsideScenario(t, s3aEnvOn(t, v, "s3a", srv, bucket), mode == "hold")
			})
		}
	}
}

func s3aOutsideScenario(t *testing.T, s *s3aEnv, hold bool) {
	o := jobOpts{Extra: s.flags}
	aID, aChk := runSourceJob(t, s.version, s.local, o)
	if !strings.HasPrefix(aChk, s.uri+"/") {
		t.Fatalf("A's checkpoint %s is not under %s: Flink did not write through s3a", aChk, s.uri)
	}
	b, bLast := startRestored(t, s.version, "B", s.local, aChk, "CLAIM", 3, o)
	ob := newS3AObjects(t, s)
	aDir := filepath.Join(s.local, aID)
	bDir := filepath.Join(s.local, b.jobID())
	// crossNow: what B's live checkpoints reference in A's folder now (B moves on every second and,
	// with CLAIM, drops what it no longer needs of A's; it never adds references into A's folder, and
	// nothing here is past --grace (1 h), so a hold once set stays for the test).
	crossNow := func() []string {
		var cross []string
		for p := range ob.liveRefs(bDir) {
			if strings.HasPrefix(p, aDir+"/") {
				cross = append(cross, p)
			}
		}
		sort.Strings(cross)
		return cross
	}
	if cross := crossNow(); len(cross) == 0 {
		t.Fatalf("B's checkpoints (latest %s) reference nothing under A's folder %s", bLast.Fields["path"], aDir)
	} else {
		t.Logf("B's live checkpoints (latest %s) reference %d objects under A's folder", bLast.Fields["path"], len(cross))
	}

	addr := freePort(t)
	flags := []string{"--s3-endpoint", s.srv.Endpoint, "--s3-path-style", "--s3-region", s3server.Region}
	extra := []string{"--metrics-addr", addr}
	if hold {
		extra = append(extra, "--hold", "required")
	}
	g := startGuardMountOn(t, s.local, "s3://"+s.bucket+"/ck", flags, true, extra...)
	g.settle()
	syncs := func() float64 {
		v, _ := metricValue(mntHTTPGet(t, "http://"+addr+"/metrics"), "ckguard_sync_duration_seconds_count")
		return v
	}
	key := ob.key
	var cross []string
	if hold {
		// The rm must come after the holds: until its hold is answered, only the mount's own refusal
		// protects a reference.
		cross = s3aWaitHeld(t, g, crossNow, key)
	} else {
		cross = crossNow()
	}

	out := s3server.AWS(t, s.srv.Endpoint, "s3", "rm", "--recursive", "s3://"+s.bucket+"/ck/"+aID+"/")
	before := syncs()
	t0 := time.Now()
	t.Logf("aws s3 rm --recursive s3://%s/ck/%s/: %d objects deleted", s.bucket, aID, strings.Count(out, "delete:"))
	gone := 0
	for _, f := range cross {
		if !ob.present(f) {
			gone++
		}
	}
	if hold {
		// The heal runs in the loss check's passes (3/4 of the sync interval apart): a pass that started
		// before the rm ended may have stat'ed an object before its marker, the next one finds it. The
		// deadline only bounds a hung mount; the sync count is the assertion.
		var missing []string
		var n float64
		for deadline := t0.Add(3 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			missing = missing[:0]
			for _, f := range cross {
				if !ob.present(f) {
					missing = append(missing, f)
				}
			}
			n = syncs() - before
			if len(missing) > 0 && n > 3 {
				// What B stopped referencing since (its own subsumption) is not healed, rightly.
				still := ob.liveRefs(s.local)
				kept := missing[:0]
				for _, f := range missing {
					if _, ok := still[f]; ok {
						kept = append(kept, f)
					}
				}
				missing = kept
			}
			if len(missing) == 0 || time.Now().After(deadline) {
				break
			}
		}
		if len(missing) > 0 {
			t.Fatalf("%d of the %d objects B references in A's folder still missing %s (%.0f syncs) after the rm: %v", len(missing), len(cross), time.Since(t0).Round(time.Millisecond), n, e2eHead(missing))
		}
		t.Logf("%d of %d referenced objects read as deleted right after the rm; all read again %s later, %.0f sync(s) after the rm ended", gone, len(cross), time.Since(t0).Round(time.Millisecond), n)
		if n > 3 {
			t.Errorf("the referenced objects read again only %.0f syncs after the rm, want within two (plus the one running)", n)
		}
		healed := map[string]bool{}
		for _, r := range s3aAudit(t, g) {
			if r.Op == "hold-heal" {
				healed[r.Path] = true
			}
		}
		t.Logf("%d hold-heal audit records", len(healed))
		if len(healed) == 0 {
			t.Errorf("no hold-heal audit record after the rm of %d referenced objects", len(cross))
		}
		// Every object of A still there after the heal is one a live checkpoint references (or a live
		// _metadata): the garbage of the same rm stays deleted.
		refs := ob.assertNothingReferencedMissing()
		for _, f := range cross {
			refs[f] = append(refs[f], "(B's, before the rm)") // healed, maybe dropped by B since
		}
		for _, f := range ob.files(aDir) {
			if _, ok := refs[f]; !ok && filepath.Base(f) != "_metadata" {
				t.Errorf("%s reads again after the rm although no live checkpoint references it", f)
			}
		}
	} else {
		if gone == 0 {
			t.Fatalf("aws s3 rm deleted none of the %d objects B references: the scenario did not happen", len(cross))
		}
		s3aWaitLossReported(t, g, cross, key)
		t.Logf("loss check: %d objects B references reported missing, %.0f sync(s) after the rm", gone, syncs()-before)

		out, code := g.cli("restore-lost")
		if code != 0 || !strings.Contains(out, "dry run") {
			vout, vcode := g.cli("verify")
			var lost []string
			for p, by := range ob.liveRefs(s.local) {
				if !ob.present(p) {
					lost = append(lost, fmt.Sprintf("%s (by %v)", ob.key(p), by))
				}
			}
			b, _ := os.ReadFile(g.log)
			t.Fatalf("restore-lost (dry run): exit %d, want 0\n%s\nverify: exit %d\n%s\nFlink's listing: %d referenced objects missing: %v\nmount log:\n%s", code, out, vcode, e2eTruncate(vout, 1500), len(lost), e2eHead(lost), e2eTruncate(string(b[max(0, len(b)-4000):]), 4000))
		}
		listed := 0
		for _, f := range cross {
			there := ob.present(f)
			switch {
			case strings.Contains(out, key(f)+": would restore version ") && there:
				t.Errorf("%s reads again after the dry run that listed it", key(f))
			case strings.Contains(out, key(f)+": would restore version "):
				listed++
			case !there:
				// B may have subsumed the checkpoints that referenced it meanwhile.
				t.Logf("the dry run does not list %s (missing)", key(f))
			}
		}
		if listed == 0 {
			t.Fatalf("the dry run lists none of the %d objects B references in A's folder:\n%s", len(cross), e2eTruncate(out, 2000))
		}
		for _, l := range strings.Split(out, "\n") {
			if strings.Contains(l, ": would restore version ") && !strings.HasPrefix(strings.TrimSpace(l), aID+"/") {
				t.Errorf("the dry run lists an object outside A's folder: %s", l)
			}
		}
		t.Logf("restore-lost (dry run) lists %d of B's objects in A's folder", listed)
		out, code = g.cli("restore-lost", "--apply")
		if code != 0 || !strings.Contains(out, "verify after the restore: OK") {
			t.Fatalf("restore-lost --apply: exit %d\n%s", code, out)
		}
		t.Logf("restore-lost --apply: %s", e2eTruncate(out, 600))
		restored := 0
		for _, r := range s3aAudit(t, g) {
			if r.Op == "restore-lost" && r.Decision == "restored" {
				restored++
			}
		}
		if restored < listed {
			t.Errorf("%d restore-lost audit records, want at least the %d objects listed", restored, listed)
		}
		ob.assertNothingReferencedMissing()
	}

	ev := restoreAfterFailure(t, b)
	if ev.Name != "restored" {
		t.Fatalf("B could not restore after the rm of A's folder: %s", ev.Fields["cause"])
	}
	t.Logf("B restored after the task failure (%s)", ev.Line)
	_, _ = b.waitCheckpoints(b.mark(), 2, flinkStepTimeout)
	b.stop()
	g.settle()
	if out, code := g.cli("verify"); code != 0 {
		t.Fatalf("ckguard verify at the end: exit %d\n%s", code, out)
	}
}

// s3aWaitHeld waits until the mount's hold ledger has every one of filesNow() held, and returns them.
func s3aWaitHeld(t *testing.T, g *guardMount, filesNow func() []string, key func(string) string) []string {
	t.Helper()
	t0 := time.Now()
	var notHeld []string
	for deadline := t0.Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		files := filesNow()
		// hold status is a subcommand: g.cli would put the store flags before it.
		args := append([]string{"hold", "status", "--store", g.storeArg, "--index", g.index}, g.storeFlags...)
		out, code := e2eCkguardRun(t, append(args, "--list", "--json")...)
		var st struct {
			Active  bool `json:"active"`
			Entries []struct {
				Key   string `json:"key"`
				State string `json:"state"`
			} `json:"entries"`
		}
		held := map[string]bool{}
		if code == 0 && json.Unmarshal([]byte(out), &st) == nil {
			for _, e := range st.Entries {
				if e.State == "held" {
					held[e.Key] = true
				}
			}
		}
		notHeld = notHeld[:0]
		for _, f := range files {
			if !held[key(f)] {
				notHeld = append(notHeld, key(f))
			}
		}
		if len(notHeld) == 0 && len(files) > 0 {
			t.Logf("all %d objects B references in A's folder are held (%s after the mount; %d held in all)", len(files), time.Since(t0).Round(time.Millisecond), len(held))
			return files
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d referenced objects not held after %s (exit %d): %v\n%s", len(notHeld), len(files), time.Since(t0), code, e2eHead(notHeld), e2eTruncate(out, 1500))
		}
	}
}

// s3aWaitLossReported waits until the mount's loss check has an audit record for an object of files
// it finds missing.
func s3aWaitLossReported(t *testing.T, g *guardMount, files []string, key func(string) string) {
	t.Helper()
	want := map[string]bool{}
	for _, f := range files {
		want[key(f)] = true
	}
	for deadline := time.Now().Add(3 * time.Minute); ; time.Sleep(500 * time.Millisecond) {
		for _, r := range s3aAudit(t, g) {
			if r.Op == "loss-check" && r.Decision == "missing" && want[r.Path] && len(r.Referencing) > 0 {
				t.Logf("loss check: %s", e2eTruncate(r.Message, 400))
				return
			}
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(g.log)
			t.Fatalf("no loss-check record for the objects deleted beside the mount in 3 minutes:\n%s", e2eTruncate(string(b), 3000))
		}
	}
}

// s3aObjects answers what the bucket holds through S3, not from the server's posix folder: on a
// versioned bucket versitygw keeps a deleted object's file there, its delete marker an attribute.
type s3aObjects struct {
	t *testing.T
	s *s3aEnv
	c *s3client.Client
}

func newS3AObjects(t *testing.T, s *s3aEnv) *s3aObjects {
	t.Helper()
	c, err := s3client.New(context.Background(), s.srv.Config(), s3client.Location{Bucket: s.bucket, Prefix: "ck/"})
	if err != nil {
		t.Fatal(err)
	}
	return &s3aObjects{t: t, s: s, c: c}
}

// key is the store key of a path of the posix folder.
func (o *s3aObjects) key(p string) string { return strings.TrimPrefix(p, o.s.local+"/") }

// present: a HEAD without a version id answers (what Flink's open finds).
func (o *s3aObjects) present(p string) bool {
	o.t.Helper()
	_, err := o.c.Head(context.Background(), o.key(p))
	if err != nil && !errors.Is(err, iofs.ErrNotExist) {
		o.t.Fatalf("HEAD %s: %v", o.key(p), err)
	}
	return err == nil
}

// files lists the current objects below dir (as posix folder paths).
func (o *s3aObjects) files(dir string) []string {
	o.t.Helper()
	var out []string
	if err := o.c.Walk(context.Background(), o.key(dir)+"/", func(ob s3client.Object) error {
		if !ob.IsDir {
			out = append(out, filepath.Join(o.s.local, ob.Key))
		}
		return nil
	}); err != nil {
		o.t.Fatal(err)
	}
	return out
}

// liveRefs is s3aEnv.refs (Flink's own listing) of the _metadata below under that S3 served when
// they were copied.
func (o *s3aObjects) liveRefs(under string) map[string][]string {
	o.t.Helper()
	o.s.live = o.present
	defer func() { o.s.live = nil }()
	return o.s.refs(o.t, under)
}

// assertNothingReferencedMissing fails when an object a live checkpoint needs does not read (one
// whose referencing _metadata are all gone meanwhile was subsumed by a running job: no loss).
func (o *s3aObjects) assertNothingReferencedMissing() map[string][]string {
	o.t.Helper()
	refs := o.liveRefs(o.s.local)
	var missing []string
	for p, by := range refs {
		if o.present(p) {
			continue
		}
		for _, m := range by {
			if o.present(m) {
				missing = append(missing, p)
				break
			}
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		o.t.Fatalf("%d objects referenced by live checkpoints do not read: %v", len(missing), e2eHead(missing))
	}
	o.t.Logf("%d referenced objects of the live checkpoints, all read", len(refs))
	return refs
}

func s3aAudit(t *testing.T, g *guardMount) []audit.Record {
	t.Helper()
	recs, err := audit.ReadFile(filepath.Join(g.index, "audit.jsonl"))
	if err != nil {
		t.Fatalf("audit log: %v", err)
	}
	return recs
}
