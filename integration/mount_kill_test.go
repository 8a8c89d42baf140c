package integration

// kill -9 of a mount daemon in the tests: a daemon that holds a file open on a FUSE mount cannot
// finish exiting when that mount's server does not answer (its own mount, whose /dev/fuse it is
// closing in the same exit: the close of the file sends FLUSH and waits forever, in D state). The
// harness checks that no daemon holds such a file, and never waits for a killed daemon without a
// bound: on timeout it aborts the FUSE connections the daemon could be waiting on, so a test fails
// instead of hanging CI.

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// mntKillWait bounds the wait for a killed daemon to be reaped. A daemon that exits normally is gone
// in milliseconds; this is a hang detector, not a speed claim.
const mntKillWait = 30 * time.Second

// mntMount is one FUSE mount of the mount table.
type mntMount struct {
	id         string // mount ID (first field of mountinfo; fdinfo's mnt_id)
	conn       string // FUSE connection number: the minor of the mount's device
	mountpoint string
	fsType     string
}

// mntFuseMounts reads the FUSE mounts of this process's mount table, by mount ID.
func mntFuseMounts() (map[string]mntMount, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := map[string]mntMount{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superopts
		fields := strings.Fields(sc.Text())
		sep := -1
		for i := 6; i < len(fields); i++ {
			if fields[i] == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+1 >= len(fields) || !strings.HasPrefix(fields[sep+1], "fuse") {
			continue
		}
		_, minor, ok := strings.Cut(fields[2], ":")
		if !ok {
			continue
		}
		out[fields[0]] = mntMount{id: fields[0], conn: minor, mountpoint: unescapeMountinfo(fields[4]), fsType: fields[sep+1]}
	}
	return out, sc.Err()
}

func unescapeMountinfo(s string) string {
	r := strings.NewReplacer(`\040`, " ", `\011`, "\t", `\012`, "\n", `\134`, `\`)
	return r.Replace(s)
}

// mntFuseConnOf is the FUSE connection number of the mount at mnt (the top of the stack), "" if none.
// A stale mount (its daemon killed) keeps its entry and its number.
func mntFuseConnOf(mnt string) string {
	ms, _ := mntFuseMounts()
	conn, best := "", -1
	for _, m := range ms {
		if m.mountpoint != mnt {
			continue
		}
		if id, _ := strconv.Atoi(m.id); id > best {
			conn, best = m.conn, id
		}
	}
	return conn
}

// mntOpenFuseFile is one file descriptor of a process that points into a FUSE mount.
type mntOpenFuseFile struct {
	fd, target string
	mount      mntMount
}

func (o mntOpenFuseFile) String() string {
	return fmt.Sprintf("fd %s -> %s (on the %s mount %s, connection %s)", o.fd, o.target, o.mount.fsType, o.mount.mountpoint, o.mount.conn)
}

// mntOpenFuseFiles lists the descriptors of process pid that point into a FUSE mount, other than
// /dev/fuse itself. It reads /proc/PID/fdinfo (mnt_id), never the files: a stat through a dead mount
// could block.
func mntOpenFuseFiles(pid int) ([]mntOpenFuseFile, error) {
	mounts, err := mntFuseMounts()
	if err != nil {
		return nil, err
	}
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []mntOpenFuseFile
	for _, e := range ents {
		info, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue // closed meanwhile
		}
		var mntID string
		for _, line := range strings.Split(string(info), "\n") {
			if v, ok := strings.CutPrefix(line, "mnt_id:"); ok {
				mntID = strings.TrimSpace(v)
			}
		}
		m, ok := mounts[mntID]
		if !ok {
			continue
		}
		target, _ := os.Readlink(filepath.Join(dir, e.Name()))
		out = append(out, mntOpenFuseFile{fd: e.Name(), target: target, mount: m})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].fd < out[j].fd })
	return out, nil
}

// mntAbortFuse aborts FUSE connection conn (every request waiting on it fails), mounting fusectl
// first if needed.
func mntAbortFuse(conn string) error {
	const root = "/sys/fs/fuse/connections"
	if _, err := os.Stat(filepath.Join(root, conn)); err != nil {
		if out, err := exec.Command("mount", "-t", "fusectl", "none", root).CombinedOutput(); err != nil {
			return fmt.Errorf("mount fusectl on %s: %v %s", root, err, out)
		}
	}
	return os.WriteFile(filepath.Join(root, conn, "abort"), []byte("1"), 0o200)
}

// mntKernelStacks is the kernel stack of every thread of pid (where a process stuck in D state waits).
func mntKernelStacks(pid int) string {
	var b strings.Builder
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*", pid))
	for _, task := range tasks {
		st, _ := os.ReadFile(filepath.Join(task, "stat"))
		stack, _ := os.ReadFile(filepath.Join(task, "stack"))
		fmt.Fprintf(&b, "%s: %s\n%s", filepath.Base(task), strings.TrimSpace(string(st)), stack)
	}
	return b.String()
}

// kill9 kills the daemon without any chance to clean up, and waits (bounded) until it is reaped.
// The daemon must hold no file open on a FUSE mount when killed (its exit would close it with a
// FLUSH the dead server never answers); if it does not exit in mntKillWait, the FUSE connections it
// could be waiting on (its own mount's, those of the files it held) are aborted and the test fails.
func (p *mntProc) kill9() {
	p.t.Helper()
	pid := p.cmd.Process.Pid
	held, err := mntOpenFuseFiles(pid)
	if err != nil {
		p.t.Logf("open files of the mount daemon %d: %v", pid, err)
	}
	for _, o := range held {
		p.t.Errorf("the mount daemon of %s holds a file open on a FUSE mount: %s; a daemon killed then cannot exit when that mount does not answer (its own mount: never)", p.mnt, o)
	}
	conns := map[string]bool{}
	if c := mntFuseConnOf(p.mnt); c != "" {
		conns[c] = true
	}
	for _, o := range held {
		conns[o.mount.conn] = true
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.exited:
		return
	case <-time.After(mntKillWait):
	}
	stacks := mntKernelStacks(pid)
	var aborted []string
	for c := range conns {
		if err := mntAbortFuse(c); err != nil {
			p.t.Logf("abort FUSE connection %s: %v", c, err)
			continue
		}
		aborted = append(aborted, c)
	}
	sort.Strings(aborted)
	select {
	case <-p.exited:
		p.t.Errorf("the mount daemon of %s, killed with SIGKILL, had not exited after %v; it exited once FUSE connections %v were aborted. Its threads:\n%s",
			p.mnt, mntKillWait, aborted, stacks)
	case <-time.After(mntKillWait):
		p.t.Fatalf("the mount daemon of %s, killed with SIGKILL, has not exited after %v, nor after aborting FUSE connections %v. Its threads:\n%s",
			p.mnt, mntKillWait, aborted, mntKernelStacks(pid))
	}
}
