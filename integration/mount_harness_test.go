package integration

// Harness of the local guard-mount tests (issue 4): a real `ckguard mount` child process over a real FUSE
// mount, driven with real tools (GNU rm, find, python3, mv).

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
)

var (
	mntBinOnce sync.Once
	mntBinPath string
	mntBinErr  error
)

// mntBinary builds ckguard once per run.
func mntBinary(t testing.TB) string {
	t.Helper()
	mntBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "ckguard-mount-bin-")
		if err != nil {
			mntBinErr = err
			return
		}
		mntBinPath = filepath.Join(dir, "ckguard")
		cmd := exec.Command("go", "build", "-o", mntBinPath, "./cmd/ckguard")
		cmd.Dir = mntRepoRoot(t)
		if out, err := cmd.CombinedOutput(); err != nil {
			mntBinErr = fmt.Errorf("%v\n%s", err, out)
		}
	})
	if mntBinErr != nil {
		t.Fatalf("go build ./cmd/ckguard: %v", mntBinErr)
	}
	return mntBinPath
}

func mntRepoRoot(t testing.TB) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Dir(wd) // tests run in integration/
}

// mntRequire: real FUSE mounts need /dev/fuse, fusermount3 and root (the tests create users and mount with
// allow_other). Missing pieces skip locally and fail in CI.
func mntRequire(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("real FUSE mount: skipped with -short")
	}
	var missing string
	if f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0); err != nil {
		missing = "/dev/fuse: " + err.Error()
	} else {
		f.Close()
	}
	if _, err := exec.LookPath("fusermount3"); err != nil && missing == "" {
		missing = "fusermount3 not installed (apt-get install fuse3)"
	}
	if os.Geteuid() != 0 && missing == "" {
		missing = "not root"
	}
	if missing == "" {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("guard mount tests need %s (required in CI)", missing)
	}
	t.Skipf("guard mount tests need %s", missing)
}

// mntProc is one `ckguard mount --foreground` child process.
type mntProc struct {
	t                      testing.TB
	store, index, mnt, log string
	audit, sock            string
	args                   []string
	cred                   *syscall.Credential // run the daemon as this user (nil: as the test, root)
	caps                   []uintptr           // with cred: ambient capabilities the daemon keeps
	wrap                   []string            // run the daemon under this command (e.g. setpriv dropping a capability)
	cmd                    *exec.Cmd
	exited                 chan struct{}
	defaultIndex           bool // mount without --index (index is then the folder the mount is expected to choose)
}

// mntStart mounts store (index in index, "" = fresh temp dir) on a fresh mountpoint (or mnt when given
// through mntAt) and waits until the kernel has it.
func mntStart(t testing.TB, store, index string, extra ...string) *mntProc {
	t.Helper()
	dir := t.TempDir()
	if index == "" {
		index = filepath.Join(dir, "index")
	}
	p := &mntProc{t: t, store: store, index: index, mnt: filepath.Join(dir, "mnt"), log: filepath.Join(dir, "mount.log"),
		audit: filepath.Join(index, "audit.jsonl"), sock: filepath.Join(index, "ckguard.sock")}
	if err := os.MkdirAll(p.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	p.start(extra...)
	return p
}

// mntStartDefaultIndex mounts store without --index: the mount chooses its default index folder
// (under $XDG_CACHE_HOME/ckguard); index is where the test expects it, for the audit log and socket.
func mntStartDefaultIndex(t testing.TB, store, index string, extra ...string) *mntProc {
	t.Helper()
	dir := t.TempDir()
	p := &mntProc{t: t, store: store, index: index, mnt: filepath.Join(dir, "mnt"), log: filepath.Join(dir, "mount.log"),
		audit: filepath.Join(index, "audit.jsonl"), sock: filepath.Join(index, "ckguard.sock"), defaultIndex: true}
	if err := os.MkdirAll(p.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	p.start(extra...)
	return p
}

func (p *mntProc) start(extra ...string) {
	t := p.t
	t.Helper()
	mntRequire(t)
	p.args = []string{"mount", "--store", p.store, "--index", p.index, "--foreground", "--sync-interval", "1s"}
	if p.defaultIndex {
		p.args = []string{"mount", "--store", p.store, "--foreground", "--sync-interval", "1s"}
	}
	p.args = append(p.args, extra...)
	p.args = append(p.args, p.mnt)
	logf, err := os.OpenFile(p.log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	p.cmd = exec.Command(mntBinary(t), p.args...)
	if len(p.wrap) > 0 {
		p.cmd = exec.Command(p.wrap[0], append(append(p.wrap[1:], mntBinary(t)), p.args...)...)
	}
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if p.cred != nil {
		p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred, AmbientCaps: p.caps}
	}
	p.exited = make(chan struct{})
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := p.exited
	cmd := p.cmd
	go func() { _ = cmd.Wait(); logf.Close(); close(exited) }()
	t.Cleanup(p.stop)
	deadline := time.Now().Add(60 * time.Second)
	for {
		// A stale mount of a killed daemon is also "fuse.ckguard" in the mount table, but listing it fails
		// (ENOTCONN); the new mount is there once both hold.
		if mi, _ := mountutil.Lookup(p.mnt); mi != nil && strings.HasPrefix(mi.FSType, "fuse.ckguard") {
			if _, err := os.ReadDir(p.mnt); err == nil {
				break
			}
		}
		select {
		case <-exited:
			t.Fatalf("ckguard mount exited early:\n%s", p.logText())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("mount did not come up in 60s:\n%s", p.logText())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *mntProc) logText() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

// stop: SIGTERM must unmount cleanly and exit 0.
func (p *mntProc) stop() {
	if p.cmd == nil || p.cmd.Process == nil {
		return
	}
	select {
	case <-p.exited:
		// Killed on purpose (kill9): only clear the stale mount it left.
		if mi, _ := mountutil.Lookup(p.mnt); mi != nil {
			_ = mountutil.Unmount(p.mnt, true)
		}
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.cmd.ProcessState != nil && !p.cmd.ProcessState.Success() {
			p.t.Errorf("ckguard mount exited with %v after SIGTERM:\n%s", p.cmd.ProcessState, p.logText())
		}
	case <-time.After(30 * time.Second):
		p.kill9() // bounded: aborts the FUSE connection if the killed daemon cannot exit
		_ = mountutil.Unmount(p.mnt, true)
		p.t.Errorf("ckguard mount did not exit within 30s of SIGTERM:\n%s", p.logText())
	}
	if mi, _ := mountutil.Lookup(p.mnt); mi != nil {
		p.t.Errorf("%s still mounted after the daemon exited", p.mnt)
		_ = mountutil.Unmount(p.mnt, true)
	}
}

func (p *mntProc) m(rel string) string { return filepath.Join(p.mnt, filepath.FromSlash(rel)) }

// cli runs a ckguard command with this mount's --store and --index.
func (p *mntProc) cli(args ...string) (string, int) {
	p.t.Helper()
	full := append([]string{args[0], "--store", p.store, "--index", p.index}, args[1:]...)
	return mntRun(p.t, "", mntBinary(p.t), full...)
}

func (p *mntProc) auditRecords() []audit.Record {
	p.t.Helper()
	recs, err := audit.ReadFile(p.audit)
	if err != nil {
		p.t.Fatalf("audit log: %v", err)
	}
	return recs
}

// mntRun runs a command (in dir) and returns combined output and exit code.
func mntRun(t testing.TB, dir, name string, args ...string) (string, int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	code := 0
	if err != nil {
		ee, ok := err.(*exec.ExitError)
		if !ok {
			t.Fatalf("%s %v: %v", name, args, err)
		}
		code = ee.ExitCode()
	}
	return out.String(), code
}

// mntFiles lists every regular file (and symlink) below root as '/'-separated keys relative to root.
func mntFiles(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if d.IsDir() && filepath.Dir(p) == filepath.Clean(root) && d.Name() == store.QuarantineDir {
			// Deletions the mount staged (--quarantine, on by default): not the store's data any more.
			return filepath.SkipDir
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// mntSameSet fails with the differences when got and want differ.
func mntSameSet(t testing.TB, what string, got, want []string) {
	t.Helper()
	g := map[string]bool{}
	for _, k := range got {
		g[k] = true
	}
	w := map[string]bool{}
	for _, k := range want {
		w[k] = true
	}
	var missing, extra []string
	for k := range w {
		if !g[k] {
			missing = append(missing, k)
		}
	}
	for k := range g {
		if !w[k] {
			extra = append(extra, k)
		}
	}
	sort.Strings(missing)
	sort.Strings(extra)
	if len(missing)+len(extra) > 0 {
		t.Errorf("%s: %d missing (should be there), %d unexpected (should be gone)\nmissing: %v\nunexpected: %v",
			what, len(missing), len(extra), mntHead(missing), mntHead(extra))
	}
}

// mntHTTPGet fetches url; unix sockets are addressed as unix:/path/to.sock:/url-path.
func mntHTTPGet(t testing.TB, url string) string {
	t.Helper()
	c := &http.Client{Timeout: 10 * time.Second}
	if rest, ok := strings.CutPrefix(url, "unix:"); ok {
		i := strings.Index(rest, ":")
		sock := rest[:i]
		url = "http://unix" + rest[i+1:]
		c.Transport = &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}}
	}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	var b bytes.Buffer
	_, _ = b.ReadFrom(resp.Body)
	return b.String()
}

func mntHead(s []string) []string {
	if len(s) > 20 {
		return s[:20]
	}
	return s
}

// stats is `ckguard stats --json` of the mount's index.
func (p *mntProc) stats() refindex.StatsResult {
	p.t.Helper()
	out, _ := p.cli("stats", "--json")
	var s refindex.StatsResult
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		p.t.Fatalf("stats --json: %v\n%s", err, out)
	}
	return s
}
