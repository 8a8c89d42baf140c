package guardd_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// idleClients opens n TCP connections to addr, sends nothing, reports "connected", then reports once the
// server has closed some of them ("closed N").
const idleClients = `
import resource, socket, sys, select
n = int(sys.argv[2])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # above the test's lowered soft limit
host, port = sys.argv[1].rsplit(":", 1)
conns = {}
for i in range(n):
    c = socket.create_connection((host, int(port)))
    conns[c.fileno()] = c
print("connected", len(conns), flush=True)
p = select.poll()
for fd in conns:
    p.register(fd, select.POLLIN)
closed = 0
while closed == 0:
    for fd, ev in p.poll(1000):
        if conns[fd].recv(1) == b"":
            closed += 1
            p.unregister(fd)
print("closed", closed, flush=True)
sys.stdin.read()
`

// Any number of idle connections to the metrics endpoint (any local user can open them) cannot take the
// descriptors the mount needs: with the daemon's descriptor table smaller than the number of clients,
// opens through the mount, a _metadata close and the periodic sync still work, and the server closes the
// idle connections it accepted.
func TestIdleMetricsClientsDoNotStarveTheMount(t *testing.T) {
	fusetest.Require(t)
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3")
	}
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	tr, err := treegen.YoungOrphan(filepath.Join(dir, "store"), time.Now(), treegen.Options{URIPrefix: "file:" + mnt})
	if err != nil {
		t.Fatal(err)
	}
	var addr, sock string
	runDaemon(t, guardd.Config{StoreDir: tr.Root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: refindex.DefaultPolicy(), MetricsAddr: "127.0.0.1:0", SyncInterval: 100 * time.Millisecond,
		Ready: func(m *guardd.Mounted) { addr, sock = m.MetricsAddr, m.ControlSocket }})

	// This process (the daemon and the test) may now open 400 more descriptors than it has open; the
	// clients are 2,000. Only the soft limit is lowered, so that it can be raised back afterwards.
	var saved syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &saved); err != nil {
		t.Fatal(err)
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	budget := uint64(len(fds) + 400)
	if saved.Max < 2100 {
		t.Skipf("the hard descriptor limit (%d) leaves no room for 2,000 clients", saved.Max)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: budget, Max: saved.Max}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &saved) })

	py := exec.Command("/usr/bin/python3", "-c", idleClients, addr, "2000")
	py.Stderr = os.Stderr
	in, err := py.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := py.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := py.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { in.Close(); _ = py.Wait() })
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "connected 2000") {
		t.Fatalf("clients: %q %v", lines.Text(), lines.Err())
	}

	// 100 files open at once through the mount, written and closed.
	var files []*os.File
	for i := range 100 {
		f, err := os.Create(filepath.Join(mnt, fmt.Sprintf("new-%03d", i)))
		if err != nil {
			t.Fatalf("open %d through the mount with 2,000 idle metrics clients: %v", i, err)
		}
		files = append(files, f)
	}
	for _, f := range files {
		if _, err := f.WriteString("x"); err != nil {
			t.Errorf("write through the mount: %v", err)
		}
		if err := f.Close(); err != nil {
			t.Errorf("close through the mount: %v", err)
		}
	}
	// A checkpoint's _metadata closed through the mount is indexed: what it references (an SST old enough
	// that nothing else protects it) is protected.
	if err := tr.Write("flink/starve/shared/a", 100, time.Now().Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	c, err := tr.Checkpoint(treegen.Spec{Dir: "flink/starve/chk-1", ID: 1, Completed: time.Now(), Shared: []string{"flink/starve/shared/a"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(tr.Root, c.Metadata))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(tr.Root, c.Metadata)); err != nil { // only its bytes were wanted
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mnt, "flink/starve/chk-1/_metadata"), b, 0o644); err != nil {
		t.Fatalf("_metadata close through the mount: %v", err)
	}
	if err := os.Remove(filepath.Join(mnt, "flink/starve/shared/a")); err == nil || !strings.Contains(err.Error(), "not permitted") {
		t.Errorf("rm of a file the new _metadata references: %v, want EPERM", err)
	}
	// Syncs that started after all this succeed.
	q, err := control.DialQuerier(sock)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	since := time.Now()
	for {
		st, err := q.Stats(context.Background())
		if err != nil {
			t.Fatalf("stats: %v", err)
		}
		if st.SyncError != "" {
			t.Fatalf("sync failed with 2,000 idle metrics clients: %s", st.SyncError)
		}
		if st.LastSync.After(since) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The connections the server accepted and that stayed idle are closed by it.
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "closed ") {
		t.Fatalf("clients: %q %v, want the server to close idle connections", lines.Text(), lines.Err())
	}
}
