package localfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/verdict"
)

// reopenScript looks argv[1] up through the mount (an O_PATH descriptor: no open reaches the daemon), says
// "ready", waits for a line on stdin, then reopens the looked-up file with the flags argv[2] names through
// /proc/self/fd, which reaches the daemon's Open for the inode the kernel has cached, whatever the store
// holds at that name by then. It prints "opened" or "errno N".
const reopenScript = `
import os, sys
fd = os.open(sys.argv[1], os.O_PATH)
print("ready", flush=True)
sys.stdin.readline()
flags = {"w": os.O_WRONLY, "r": os.O_RDONLY}[sys.argv[2]]
try:
    os.open("/proc/self/fd/%d" % fd, flags)
    print("opened", flush=True)
except OSError as e:
    print("errno", e.errno, flush=True)
`

// TestOpenOfReplacedFileNeverBlocks: a file the kernel still has cached as a regular file, replaced in the
// store by a FIFO (no reader) and then opened through the mount, never blocks the daemon: the open is
// refused with ESTALE (the kernel retries with a fresh lookup for a path open, and then opens the FIFO in
// the caller's own context). A rename (exclusive lock) and a decided rm queued after it complete. Before,
// the daemon blocked in open(2) inside the enforcer's lock for good and every later rename, rm and
// _metadata close queued behind it.
func TestOpenOfReplacedFileNeverBlocks(t *testing.T) {
	for _, mode := range []string{"w", "r"} {
		t.Run(map[string]string{"w": "for writing", "r": "read-only"}[mode], func(t *testing.T) {
			store := t.TempDir()
			e := mountShared(t, store)
			for _, k := range []string{"job/x.sst", "job/free.sst", "job/mv.sst"} {
				e.write(t, k, "data")
				if err := os.Chown(filepath.Join(store, k), 65534, 65534); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.Chown(filepath.Join(store, "job"), 65534, 65534); err != nil {
				t.Fatal(err)
			}
			decided := make(chan struct{})
			var once sync.Once
			e.setDecideHook(func(key string, op verdict.Op) {
				if key == "job/x.sst" && op == verdict.OpWrite {
					once.Do(func() { close(decided) })
				}
			})

			cmd := exec.Command("setpriv", "--reuid="+nobody, "--regid="+nobody, "--clear-groups", "--",
				"/usr/bin/python3", "-c", reopenScript, filepath.Join(e.mnt, "job/x.sst"), mode)
			cmd.Dir = "/"
			stdin, err := cmd.StdinPipe()
			if err != nil {
				t.Fatal(err)
			}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			fifo := filepath.Join(store, "job/x.sst")
			// Whatever happens, the daemon is released at the end (both ends of the FIFO), so a failing
			// run does not leave a thread blocked in open(2) behind the unmount.
			defer func() {
				if f, err := os.OpenFile(fifo, os.O_RDWR, 0); err == nil {
					defer f.Close()
				}
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
			}()
			lines := bufio.NewScanner(stdout)
			if !lines.Scan() || lines.Text() != "ready" {
				t.Fatalf("helper: %q", lines.Text())
			}
			if err := os.Remove(fifo); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(fifo, 0o666); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(fifo, 65534, 65534); err != nil {
				t.Fatal(err)
			}
			if _, err := stdin.Write([]byte("go\n")); err != nil {
				t.Fatal(err)
			}
			result := make(chan string, 1)
			go func() {
				if lines.Scan() {
					result <- lines.Text()
				}
				close(result)
			}()
			if mode == "w" {
				// The open is being decided: the daemon holds the enforcer's lock from here to the end
				// of its open(2).
				<-decided
			}
			// A rename needs the lock exclusively; an rm queued behind it needs it shared.
			done := make(chan string, 2)
			go func() {
				out, err := asNobody(t, "mv", filepath.Join(e.mnt, "job/mv.sst"), filepath.Join(e.mnt, "job/mv2.sst"))
				done <- "mv: " + errString(err) + " " + out
			}()
			go func() {
				out, err := asNobody(t, "rm", filepath.Join(e.mnt, "job/free.sst"))
				done <- "rm: " + errString(err) + " " + out
			}()
			for range 2 {
				select {
				case r := <-done:
					if !strings.HasSuffix(strings.TrimSpace(r), ": ok") {
						t.Errorf("%s", r)
					}
				case <-time.After(hangAfter):
					// Only a hang detector: these finish at once unless something holds the lock.
					t.Fatalf("a rename and an rm through the mount did not complete while an open of a FIFO was in progress")
				}
			}
			if e.exists("job/free.sst") || !e.exists("job/mv2.sst") {
				t.Errorf("rm/mv did not take effect")
			}
			var r string
			select {
			case r = <-result:
			case <-time.After(hangAfter):
				t.Fatalf("the open of a FIFO through the mount did not return")
			}
			if r != "errno "+itoa(uint64(syscall.ESTALE)) {
				t.Errorf("reopening the replaced file through the mount: %q, want ESTALE (%d)", r, syscall.ESTALE)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// hangAfter is how long the test waits before calling an operation hung (only a hang detector: what it
// waits for completes at once unless something blocks).
var hangAfter = time.Minute
