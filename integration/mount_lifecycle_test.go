package integration

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/posixtest"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// metricValue returns the value of the first sample of name whose labels contain all of labels.
func metricValue(text, name string, labels ...string) (float64, bool) {
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, name) || strings.HasPrefix(l, "#") {
			continue
		}
		rest := l[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		ok := true
		for _, lb := range labels {
			if !strings.Contains(rest, lb) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(l)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		return v, err == nil
	}
	return 0, false
}

// TestMountControlMetricsXattrs: while mounted, the CLI reaches the index through the control socket
// (the mount holds the badger lock), the metrics endpoint counts decisions, refusals are explained in
// user.ckguard.* attributes, and reads bypass the daemon when the kernel offers FUSE passthrough.
func TestMountControlMetricsXattrs(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentTwo(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	p := mntStart(t, tr.Root, "", "--metrics-addr", addr)
	ref := tr.Referenced()[0]

	// The index is locked by the mount: opening it directly fails, the CLI goes through the socket.
	st, _ := localstore.New(tr.Root)
	if _, err := refindex.Open(p.index, st, refindex.DefaultPolicy()); !errors.Is(err, refindex.ErrLocked) {
		t.Errorf("opening the mount's index directly: %v, want ErrLocked", err)
	}
	q, err := control.DialQuerier(p.sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	why, err := q.Why(context.Background(), ref)
	if err != nil || why.Allow || why.Reason != verdict.ReasonReferenced || len(why.Referencing) == 0 {
		t.Errorf("Why over the socket: %+v %v", why, err)
	}
	out, code := p.cli("why", ref)
	if code == 0 || !strings.Contains(out, "referenced") {
		t.Errorf("`ckguard why` while mounted (exit %d):\n%s", code, out)
	}
	ctx := context.Background()
	pinned := tr.Purge + "/chk-100"
	if r, err := q.Pin(ctx, pinned); err != nil || !r.Pinned {
		t.Errorf("pin over the socket: %+v %v", r, err)
	}
	if w, err := q.Why(ctx, pinned+"/_metadata"); err != nil || w.Allow || w.Reason != verdict.ReasonPinned {
		t.Errorf("pinned checkpoint's _metadata: %+v %v", w, err)
	}
	if r, err := q.Unpin(ctx, pinned); err != nil || r.Pinned {
		t.Errorf("unpin over the socket: %+v %v", r, err)
	}
	if c, err := q.Checkpoints(ctx, ""); err != nil || len(c.Jobs) == 0 {
		t.Errorf("checkpoints over the socket: %+v %v", c, err)
	}
	if o, err := q.Orphans(ctx, time.Hour); err != nil || time.Duration(o.OlderThan) != time.Hour {
		t.Errorf("orphans over the socket: %+v %v", o, err)
	}
	if v, err := q.Verify(ctx); err != nil || !v.OK || v.Checked != len(tr.Live) {
		t.Errorf("verify over the socket: %+v %v", v, err)
	}
	if s, err := q.Stats(ctx); err != nil || s.Checkpoints+s.Savepoints != len(tr.Live) || s.LastSync.IsZero() {
		t.Errorf("stats over the socket: %+v %v", s, err)
	}
	for _, cmd := range [][]string{{"stats"}, {"verify"}, {"checkpoints"}, {"orphans"}} {
		if out, code := p.cli(cmd...); code != 0 {
			t.Errorf("ckguard %s while mounted: exit %d\n%s", cmd[0], code, out)
		}
	}

	// xattrs where the user stands.
	buf := make([]byte, 4096)
	n, err := syscall.Getxattr(p.m(ref), "user.ckguard.state", buf)
	if err != nil || string(buf[:n]) != "referenced" {
		t.Errorf("user.ckguard.state of %s: %q %v", ref, buf[:n], err)
	}
	n, err = syscall.Getxattr(p.m(ref), "user.ckguard.refs", buf)
	if err != nil || !strings.Contains(string(buf[:n]), "_metadata") {
		t.Errorf("user.ckguard.refs of %s: %q %v", ref, buf[:n], err)
	}
	if out, code := mntRun(t, "", "getfattr", "-n", "user.ckguard.state", p.m(ref)); code != 0 || !strings.Contains(out, `user.ckguard.state="referenced"`) {
		t.Errorf("getfattr: %s", out)
	}

	// Decisions are counted.
	if err := os.Remove(p.m(ref)); !errors.Is(err, syscall.EPERM) {
		t.Errorf("remove referenced: %v", err)
	}
	// Reads: with passthrough the kernel reads the store file itself; the daemon sees no READ.
	data, err := os.ReadFile(p.m(ref))
	if err != nil || len(data) == 0 {
		t.Fatalf("read through the mount: %v", err)
	}
	passthrough := strings.Contains(p.logText(), "passthrough=true")
	metrics := mntHTTPGet(t, "http://"+addr+"/metrics")
	if v, ok := metricValue(metrics, "ckguard_refusals_total", `op="unlink"`, `reason="referenced"`); !ok || v < 1 {
		t.Errorf("ckguard_refusals_total{op=unlink,reason=referenced} = %v (%v)", v, ok)
	}
	if v, ok := metricValue(metrics, "ckguard_fuse_op_duration_seconds_count", `op="lookup"`); !ok || v < 1 {
		t.Errorf("no FUSE latency samples: %v %v", v, ok)
	}
	reads, _ := metricValue(metrics, "ckguard_fuse_op_duration_seconds_count", `op="read"`)
	t.Logf("passthrough offered by the kernel: %v; READ requests seen by the daemon: %v", passthrough, reads)
	if passthrough && reads > 0 {
		t.Errorf("passthrough is on but the daemon served %v READs", reads)
	}
	// Index gauges are refreshed after each sync (every second here).
	deadline := time.Now().Add(10 * time.Second)
	for {
		metrics = mntHTTPGet(t, "http://"+addr+"/metrics")
		v, ok := metricValue(metrics, "ckguard_live_checkpoints")
		if ok && v == float64(len(tr.Live)) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("ckguard_live_checkpoints = %v, want %d", v, len(tr.Live))
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, name := range []string{"ckguard_index_lag_seconds", "ckguard_sync_duration_seconds_count", "ckguard_orphaned_bytes", "ckguard_referenced_bytes", "ckguard_live_savepoints"} {
		if _, ok := metricValue(metrics, name); !ok {
			t.Errorf("metric %s missing", name)
		}
	}
	p.stop()
	// After the mount the CLI opens the index itself.
	if out, code := p.cli("why", ref); code == 0 || !strings.Contains(out, "referenced") {
		t.Errorf("`ckguard why` after unmount (exit %d):\n%s", code, out)
	}
}

// TestMountDaemonAndUmount: without --foreground the command returns once the mount is ready and the
// daemon lives on; `ckguard umount` unmounts, the daemon closes the index and exits; a second mount on a
// live mountpoint is refused; --refuse-errno changes the errno.
func TestMountDaemonAndUmount(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	index := filepath.Join(dir, "index")
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	out, code := mntRun(t, "", mntBinary(t), "mount", "--store", tr.Root, "--index", index, "--refuse-errno", "EACCES", mnt)
	if code != 0 {
		t.Fatalf("daemon mount: exit %d\n%s", code, out)
	}
	// The user at the terminal will only see "Operation not permitted": the start message says how to
	// learn why.
	if !strings.Contains(out, "ckguard why --store "+tr.Root+" --index "+index+" "+mnt+"/PATH") || !strings.Contains(out, "getfattr -n user.ckguard.state "+mnt+"/PATH") {
		t.Errorf("start message does not say how to learn why a deletion was refused:\n%s", out)
	}
	t.Cleanup(func() { _ = mountutil.Unmount(mnt, true) })
	// Ready means usable now, not eventually.
	ents, err := os.ReadDir(mnt)
	if err != nil || len(ents) == 0 {
		t.Fatalf("mount not usable when the command returned: %v %v", ents, err)
	}
	if err := os.Remove(filepath.Join(mnt, tr.Referenced()[0])); !errors.Is(err, syscall.EACCES) {
		t.Errorf("refusal with --refuse-errno EACCES: %v", err)
	}
	// A second mount on the live mountpoint fails and says why.
	out, code = mntRun(t, "", mntBinary(t), "mount", "--foreground", "--store", tr.Root, "--index", filepath.Join(dir, "index2"), mnt)
	if code == 0 || !strings.Contains(out, "already mounted") {
		t.Errorf("second mount on a live mountpoint: exit %d\n%s", code, out)
	}
	logText, _ := os.ReadFile(filepath.Join(index, "ckguard.log"))
	if !strings.Contains(string(logText), "mounted") || !strings.Contains(string(logText), "user.ckguard.state") {
		t.Errorf("daemon log lacks the mount line or how to learn why a deletion was refused:\n%s", logText)
	}
	// The advice of a stale-index refusal (`ckguard index sync`) works while the mount holds the index:
	// it reports the mount's own sync; a rebuild says to unmount first.
	if out, code := mntRun(t, "", mntBinary(t), "index", "sync", "--store", tr.Root, "--index", index); code != 0 || !strings.Contains(out, "held by a running mount") {
		t.Errorf("index sync while mounted: exit %d\n%s", code, out)
	}
	if out, code := mntRun(t, "", mntBinary(t), "index", "rebuild", "--store", tr.Root, "--index", index); code != 2 || !strings.Contains(out, "unmount it first") {
		t.Errorf("index rebuild while mounted: exit %d\n%s", code, out)
	}
	out, code = mntRun(t, "", mntBinary(t), "umount", mnt)
	if code != 0 {
		t.Fatalf("ckguard umount: exit %d\n%s", code, out)
	}
	if mi, _ := mountutil.Lookup(mnt); mi != nil {
		t.Fatalf("still mounted after ckguard umount")
	}
	// The daemon releases the index lock once it has shut down.
	st, _ := localstore.New(tr.Root)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ix, err := refindex.Open(index, st, refindex.DefaultPolicy(), refindex.WithLogger(slog.New(slog.DiscardHandler)))
		if err == nil {
			ix.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("index still locked 10s after umount: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.Stat(filepath.Join(index, control.SocketName)); !os.IsNotExist(err) {
		t.Errorf("control socket left behind after a clean shutdown: %v", err)
	}
	// A normal umount is not an incident.
	if logText, _ := os.ReadFile(filepath.Join(index, "ckguard.log")); strings.Contains(string(logText), "from outside") || !strings.Contains(string(logText), "unmounted; shutting down") {
		t.Errorf("daemon log after ckguard umount:\n%s", logText)
	}
	// SIGINT also unmounts cleanly (the foreground harness uses SIGTERM).
	p := mntStart(t, tr.Root, index)
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.exited:
	case <-time.After(20 * time.Second):
		t.Fatal("no exit after SIGINT")
	}
	if !p.cmd.ProcessState.Success() {
		t.Errorf("exit after SIGINT: %v", p.cmd.ProcessState)
	}
	if mi, _ := mountutil.Lookup(p.mnt); mi != nil {
		t.Errorf("still mounted after SIGINT")
	}
}

// TestMountPosix runs go-fuse's posixtest suite through a real `ckguard mount` with the real index (grace
// 0 so the suite's fresh files are deletable): for everything it allows, the guard is a loopback. Without
// the quarantine: a staged file keeps a name there, so fstat of an open file after its unlink shows one
// link, not none (FstatDeleted), which is the quarantine's point, not a loopback's.
func TestMountPosix(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.Mkdir(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, store, "", "--grace", "0s", "--quarantine", "0s")
	skipped := map[string]string{
		"FcntlFlockLocksFile": "skipped by go-fuse's own TestAll for every filesystem (POSIX locks are not forwarded by go-fuse's loopback)",
		"OpenSymlinkRace":     "skipped by go-fuse's own TestAll for every filesystem (a race stress test upstream does not run)",
	}
	names := make([]string, 0, len(posixtest.All))
	for k := range posixtest.All {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		t.Run(k, func(t *testing.T) {
			if why, ok := skipped[k]; ok {
				t.Skip(why)
			}
			sub := filepath.Join(p.mnt, k)
			if err := os.MkdirAll(sub, 0o755); err != nil {
				t.Fatal(err)
			}
			posixtest.All[k](t, sub)
			os.RemoveAll(sub)
		})
	}
	// Every decision the suite caused was logged with its caller.
	re := regexp.MustCompile(`"comm":"[^"]+"`)
	b, _ := os.ReadFile(p.audit)
	if len(b) == 0 || !re.Match(b) {
		t.Errorf("audit log empty or without callers")
	}
	var rec map[string]any
	first := strings.SplitN(string(b), "\n", 2)[0]
	if err := json.Unmarshal([]byte(first), &rec); err != nil {
		t.Errorf("audit line not JSON: %v", err)
	}
}

// TestMountPicksUpDirectChanges: checkpoints written into the store directly (not through the mount) are
// protected once the periodic sync has seen them; until then the guard still holds (in-flight files are in
// grace, and an index older than --max-staleness refuses everything).
func TestMountPicksUpDirectChanges(t *testing.T) {
	mntRequire(t)
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	if err := os.MkdirAll(store, 0o755); err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, store, "") // --sync-interval 1s
	tr, err := treegen.IncidentTwo(store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Wait until the mount's index has seen every new _metadata.
	deadline := time.Now().Add(20 * time.Second)
	for {
		buf := make([]byte, 64)
		n, err := syscall.Getxattr(p.m(tr.Referenced()[0]), "user.ckguard.state", buf)
		if err == nil && string(buf[:n]) == "referenced" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("periodic sync did not pick up the checkpoints written directly: %q %v", buf[:n], err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	mntRun(t, "", "rm", "-rf", p.m(tr.Purge))
	p.stop()
	mntSameSet(t, "after rm -rf of checkpoints written directly into the store", mntFiles(t, store), expectedAfter(tr, mntCleanups[0], treegen.DefaultPolicy))
}
