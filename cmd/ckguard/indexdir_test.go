package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	fusefs "github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"

	"github.com/ckguard/ckguard/internal/storeid"
)

// TestDefaultIndexOfASymlinkedStore: without --index, the store given through a symlink and at its
// real path is one store with one default index folder: a pin made through the symlink is the pin
// the real path sees (and a mount of it would open), and the folder records the store's identity.
// An index folder left under the name an earlier version gave the symlinked spelling is named in a
// warning (which one is used, how to remove the other), never used silently beside the store's own.
func TestDefaultIndexOfASymlinkedStore(t *testing.T) {
	cs := newCLIStore(t)
	base := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(cs.store, link); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(base, "cache")
	t.Setenv("XDG_CACHE_HOME", cache)
	ck := path.Dir(cs.savepoint + "/_metadata")

	if r := runBinary(t, "pin", "--store", link, ck); r.code != 0 {
		t.Fatalf("pin through the symlink: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r := runBinary(t, "checkpoints", "--store", cs.store, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"pinned": true`) {
		t.Fatalf("checkpoints at the real path: exit %d, no pinned checkpoint: %s%s", r.code, r.stdout, r.stderr)
	}
	ents, err := os.ReadDir(filepath.Join(cache, "ckguard"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("index folders %v, want one", ents)
	}
	own := filepath.Join(cache, "ckguard", ents[0].Name())
	id, ok, err := storeid.Read(own)
	if err != nil || !ok || !id.Same(storeid.OfLocal(cs.store)) {
		t.Fatalf("identity recorded in %s: %+v %v %v", own, id, ok, err)
	}

	// An earlier version's folder for the symlinked spelling: warned about, not used.
	legacy := filepath.Join(cache, "ckguard", storeid.HashName(link))
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, "checkpoints", "--store", link, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"pinned": true`) {
		t.Fatalf("checkpoints through the symlink beside an old folder: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, legacy) || !strings.Contains(r.stderr, "using "+own) || !strings.Contains(r.stderr, "rm -rf "+legacy) {
		t.Errorf("no warning naming the second folder %s, the one used and how to remove it: %s", legacy, r.stderr)
	}
	if strings.Count(r.stderr, "second index folder") != 1 {
		t.Errorf("the warning is given once per command: %s", r.stderr)
	}
}

// TestMain lets the test binary serve as a probe child too (probeMounts starts /proc/self/exe,
// which in a test is this binary).
func TestMain(m *testing.M) {
	statProbeChild()
	os.Exit(m.Run())
}

// stallingRoot is the root of a FUSE file system whose GETATTR, once stall is armed, does not answer
// until release is closed: a hung mount daemon. The exception is a caller in a direct child of this
// test process (the command under test itself, not a process the command started): it is answered at
// once and recorded in own, since a thread of the command waiting there would keep the command from
// exiting (a request the daemon has read is waited for even by a killed process).
type stallingRoot struct {
	fusefs.Inode
	stall   atomic.Bool
	release chan struct{}
	mu      sync.Mutex
	held    int   // callers held until release
	own     []int // pids of the command's own callers
}

func (r *stallingRoot) Getattr(ctx context.Context, _ fusefs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	out.Mode = syscall.S_IFDIR | 0o755
	c, ok := fuse.FromContext(ctx)
	if !r.stall.Load() || !ok {
		return 0
	}
	// The caller is blocked in this request, so its /proc entry is there to read.
	tgid, ppid := procOf(c.Pid)
	r.mu.Lock()
	if ppid == os.Getpid() {
		r.own = append(r.own, tgid)
		r.mu.Unlock()
		return 0
	}
	r.held++
	r.mu.Unlock()
	<-r.release
	return 0
}

func (r *stallingRoot) seen() (held int, own []int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.held, append([]int(nil), r.own...)
}

// procOf is the process (thread group) of thread tid, which the FUSE request header names, and that
// process's parent; -1 where /proc does not say.
func procOf(tid uint32) (tgid, ppid int) {
	tgid, ppid = -1, -1
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", tid))
	if err != nil {
		return
	}
	for _, l := range strings.Split(string(b), "\n") {
		k, v, _ := strings.Cut(l, ":")
		n, err := strconv.Atoi(strings.TrimSpace(v))
		switch {
		case err != nil:
		case k == "Tgid":
			tgid = n
		case k == "PPid":
			ppid = n
		}
	}
	return
}

// fuseFDsCloseOnExec marks this process's /dev/fuse descriptors close-on-exec (go-fuse's direct mount
// leaves them inheritable). A command started by the test must not hold the stand-in daemon's device:
// a thread of it waiting on the mount would then keep the connection open while it waits on it.
func fuseFDsCloseOnExec(t *testing.T) {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && l == "/dev/fuse" {
			if fd, err := strconv.Atoi(e.Name()); err == nil {
				syscall.CloseOnExec(fd)
			}
		}
	}
}

// TestOtherMountThatNeverAnswers: a ckguard mount of the store whose index the command cannot find
// makes the command refuse (exit 2, naming the mount), and whether that mount's daemon still runs is
// asked by a stat in a child process. A mount whose daemon never answers (a go-fuse server blocked
// in GETATTR) is refused as running, the message says it could not be checked, and the command
// finishes without any thread of its own waiting on that mount (such a thread could keep the command
// from ever exiting).
func TestOtherMountThatNeverAnswers(t *testing.T) {
	requireFUSEForDemo(t)
	bin := builtBinary(t)
	for _, tc := range []struct {
		name  string
		stall bool
		want  []string
	}{
		{"answers", false, []string{"guarded by the running mount on"}},
		{"never answers", true, []string{"did not answer a stat", "could not be checked", "counts as running"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cs := newCLIStore(t)
			t.Setenv("XDG_CACHE_HOME", filepath.Join(t.TempDir(), "cache"))
			mnt := t.TempDir()
			root := &stallingRoot{release: make(chan struct{})}
			zero := time.Duration(0)
			srv, err := fusefs.Mount(mnt, root, &fusefs.Options{
				AttrTimeout: &zero, EntryTimeout: &zero,
				// fuse.ckguard with the store as its source: what a ckguard mount of the store shows.
				MountOptions: fuse.MountOptions{Name: "ckguard", FsName: cs.store, DirectMount: true},
			})
			if err != nil {
				t.Fatalf("mount the stand-in daemon: %v", err)
			}
			t.Cleanup(func() {
				close(root.release)
				_ = srv.Unmount()
			})
			fuseFDsCloseOnExec(t)
			root.stall.Store(tc.stall)

			// A bound against a hang only: the command takes about probeTimeout here.
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, bin, "checkpoints", "--store", cs.store)
			cmd.Env = append(os.Environ(), "CKGUARD_STORE=", "CKGUARD_INDEX=")
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			err = cmd.Wait()
			if ctx.Err() != nil {
				t.Fatalf("the command did not finish with %s never answering (killed after 2 min): %s", mnt, out.String())
			}
			t.Logf("ckguard checkpoints: %s", out.String())
			if code := cmd.ProcessState.ExitCode(); code != exitUsage {
				t.Errorf("exit %d (%v), want %d (refused): %s", code, err, exitUsage, out.String())
			}
			for _, w := range append([]string{mnt}, tc.want...) {
				if !strings.Contains(out.String(), w) {
					t.Errorf("the refusal does not say %q: %s", w, out.String())
				}
			}
			if !tc.stall {
				return
			}
			held, own := root.seen()
			if len(own) > 0 {
				t.Errorf("the command (pid %v) itself waited on the hung mount %s: killed while waiting it could not exit until the mount answers", own, mnt)
			}
			if held == 0 && len(own) == 0 {
				t.Errorf("nothing asked the hung mount %s whether it runs", mnt)
			}
		})
	}
}
