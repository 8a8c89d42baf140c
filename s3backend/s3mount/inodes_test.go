package s3mount_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// smallInodes mounts with a bound of max file inodes, so that the kernel forgets inodes all the time.
func smallInodes(max int, more ...func(*s3mount.Options)) func(*s3mount.Options) {
	return func(o *s3mount.Options) {
		o.MaxInodes = max
		for _, f := range more {
			f(o)
		}
	}
}

func statIno(t *testing.T, p string) uint64 {
	t.Helper()
	st, err := os.Lstat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Sys().(*syscall.Stat_t).Ino
}

// direntInos reads dir with getdents64 and returns each name's d_ino.
func direntInos(t *testing.T, dir string) map[string]uint64 {
	t.Helper()
	fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	out := map[string]uint64{}
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.Getdents(fd, buf)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			return out
		}
		for off := 0; off < n; {
			ino := *(*uint64)(unsafe.Pointer(&buf[off]))
			reclen := int(*(*uint16)(unsafe.Pointer(&buf[off+16])))
			name := buf[off+19 : off+reclen]
			name = name[:bytes.IndexByte(name, 0)]
			if s := string(name); s != "." && s != ".." {
				out[s] = ino
			}
			off += reclen
		}
	}
}

// putMany writes n one-byte objects dir/f0000.. beside the mount.
func (e *env) putMany(t *testing.T, dir string, n int) {
	t.Helper()
	for i := range n {
		e.put(t, fmt.Sprintf("%s/f%04d", dir, i), "x")
	}
}

// churn looks up n files of dir through the mount (as ls -l does), so that older inodes are pruned, and
// waits until the kernel holds at most max file inodes.
func (e *env) churn(t *testing.T, dir string, n, max int) {
	t.Helper()
	for i := range n {
		if _, err := os.Lstat(e.path(fmt.Sprintf("%s/f%04d", dir, i))); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.m.LiveFileInodes() > max {
		if time.Now().After(deadline) {
			t.Fatalf("the kernel still holds %d file inodes, bound %d", e.m.LiveFileInodes(), max)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestInodesReleasedAfterWalk: find and ls -l over many objects leave the kernel (and so go-fuse and the
// mount) holding no more file inodes than the bound, and every object keeps its inode number after the
// kernel forgot it and looked it up again.
func TestInodesReleasedAfterWalk(t *testing.T) {
	const files, max = 1500, 100
	e := setup(t, newChecker(), smallInodes(max))
	e.putMany(t, "job/a", files)
	first := map[string]uint64{}
	for i := range files {
		p := e.path(fmt.Sprintf("job/a/f%04d", i))
		first[p] = statIno(t, p)
	}
	if out, err := exec.Command("find", e.mnt, "-type", "f").CombinedOutput(); err != nil || strings.Count(string(out), "\n") != files {
		t.Fatalf("find: %v, %d lines", err, strings.Count(string(out), "\n"))
	}
	if out, err := exec.Command("ls", "-l", e.path("job/a")).CombinedOutput(); err != nil {
		t.Fatalf("ls -l: %v %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for e.m.LiveFileInodes() > max+max/10 {
		if time.Now().After(deadline) {
			t.Fatalf("after find and ls -l over %d objects the kernel holds %d file inodes, bound %d", files, e.m.LiveFileInodes(), max)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The pruner takes the oldest first, but a node named while the kernel did not hold it yet (a
	// readdirplus reply being built) or held it in use goes back to the end of the queue, so which
	// ones remain is not strictly the newest: the bound is the claim, and most of the oldest are gone.
	held := 0
	for i := range max {
		if e.m.InodeKnown(fmt.Sprintf("job/a/f%04d", i)) {
			held++
		}
	}
	if held > max/2 {
		t.Fatalf("%d of the %d files looked up first are still held: the oldest were not pruned first", held, max)
	}
	seen := map[uint64]string{}
	for p, ino := range first {
		if got := statIno(t, p); got != ino {
			t.Errorf("%s: inode %d, %d before the kernel forgot it", p, got, ino)
		}
		if q, dup := seen[ino]; dup {
			t.Errorf("%s and %s share inode %d", p, q, ino)
		}
		seen[ino] = p
	}
}

// TestMvAfterForget: coreutils mv within a directory, across directories and onto an existing file
// works on objects whose inodes the kernel forgot between the commands (mv compares st_ino of source and
// target), with ordinary inode numbers and with every key's hash colliding.
func TestMvAfterForget(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			const max = 8
			e := setup(t, newChecker(), smallInodes(max, func(o *s3mount.Options) {
				if collide {
					s3mount.HashInodes(o, func(string) uint64 { return 42 })
				}
			}))
			e.putMany(t, "job/churn", 40)
			for i := range 6 {
				e.put(t, fmt.Sprintf("job/a/m%d", i), fmt.Sprintf("content %d", i))
			}
			e.put(t, "job/b/target", "old target")
			mv := func(from, to string) {
				t.Helper()
				e.churn(t, "job/churn", 40, max+max/2)
				if out, err := exec.Command("mv", e.path(from), e.path(to)).CombinedOutput(); err != nil {
					t.Fatalf("mv %s %s: %v %s", from, to, err, out)
				}
			}
			mv("job/a/m0", "job/a/r0") // within a directory
			mv("job/a/m1", "job/b/m1") // across directories
			mv("job/a/m2", "job/b/target")
			for i := 3; i < 6; i++ { // forgotten again, then the moved files move on
				mv(fmt.Sprintf("job/a/m%d", i), fmt.Sprintf("job/b/x%d", i))
				mv(fmt.Sprintf("job/b/x%d", i), fmt.Sprintf("job/a/y%d", i))
			}
			want := map[string]string{"job/a/r0": "content 0", "job/b/m1": "content 1", "job/b/target": "content 2",
				"job/a/y3": "content 3", "job/a/y4": "content 4", "job/a/y5": "content 5"}
			for k, body := range want {
				b, err := os.ReadFile(e.path(k))
				if err != nil || string(b) != body {
					t.Errorf("%s: %q %v, want %q", k, b, err, body)
				}
			}
			for _, k := range []string{"job/a/m0", "job/a/m1", "job/a/m2", "job/b/x3", "job/a/m5"} {
				if e.exists(t, k) {
					t.Errorf("%s still in the bucket after mv", k)
				}
			}
			inos := map[uint64]string{}
			for k := range want {
				ino := statIno(t, e.path(k))
				if o, dup := inos[ino]; dup {
					t.Errorf("%s and %s share inode %d", k, o, ino)
				}
				inos[ino] = k
			}
		})
	}
}

// TestRenameOpenFileKeepsItsInode: a file open while renamed keeps its inode (fstat of the descriptor and
// stat of the new name agree, reads go on); a new object of the old name gets another number while the
// moved one is held; the same after the kernel forgot what it could.
func TestRenameOpenFileKeepsItsInode(t *testing.T) {
	const max = 8
	e := setup(t, newChecker(), smallInodes(max))
	e.putMany(t, "job/churn", 40)
	e.put(t, "job/f", "first content")
	f, err := os.Open(e.path("job/f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := os.Rename(e.path("job/f"), e.path("job/g")); err != nil {
		t.Fatal(err)
	}
	e.churn(t, "job/churn", 40, max+max/2)
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	if g := statIno(t, e.path("job/g")); g != st.Ino {
		t.Errorf("the renamed open file: fstat inode %d, stat of its new name %d", st.Ino, g)
	}
	if b, err := os.ReadFile(e.path("job/g")); err != nil || string(b) != "first content" {
		t.Errorf("read of the renamed file: %q %v", b, err)
	}
	buf := make([]byte, 5)
	if _, err := f.ReadAt(buf, 0); err != nil || string(buf) != "first" {
		t.Errorf("read through the descriptor opened before the rename: %q %v", buf, err)
	}
	if err := os.WriteFile(e.path("job/f"), []byte("second"), 0o644); err != nil {
		t.Fatal(err)
	}
	if nf, g := statIno(t, e.path("job/f")), statIno(t, e.path("job/g")); nf == g {
		t.Errorf("the new job/f shares inode %d with the moved, open job/g", nf)
	}
}

// TestUnlinkOfForgottenInode: rm of a name whose inode the kernel forgot removes the object; the name is
// gone at once; a new file of that name is a new, readable object with its own number.
func TestUnlinkOfForgottenInode(t *testing.T) {
	const max = 8
	e := setup(t, newChecker(), smallInodes(max))
	e.putMany(t, "job/churn", 40)
	e.put(t, "job/victim", "v")
	e.put(t, "job/other", "o")
	before := statIno(t, e.path("job/victim"))
	e.churn(t, "job/churn", 40, max+max/2)
	if e.m.InodeKnown("job/victim") {
		t.Fatal("the victim's inode is still held: the test does not test a forgotten inode")
	}
	if out, err := exec.Command("rm", e.path("job/victim")).CombinedOutput(); err != nil {
		t.Fatalf("rm: %v %s", err, out)
	}
	if e.exists(t, "job/victim") {
		t.Error("the object is still in the bucket")
	}
	if _, err := os.Stat(e.path("job/victim")); !os.IsNotExist(err) {
		t.Errorf("stat after rm: %v", err)
	}
	if err := os.WriteFile(e.path("job/victim"), []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(e.path("job/victim")); err != nil || string(b) != "new" {
		t.Errorf("new file: %q %v", b, err)
	}
	_ = before
	if a, b := statIno(t, e.path("job/victim")), statIno(t, e.path("job/other")); a == b {
		t.Errorf("job/victim and job/other share inode %d", a)
	}
}

// TestReaddirInodesMatchStat: the d_ino readdir returns is the st_ino stat returns, for every entry,
// while the kernel forgets inodes between the two; with colliding hashes every live object still has
// its own number.
func TestReaddirInodesMatchStat(t *testing.T) {
	for _, collide := range []bool{false, true} {
		t.Run(fmt.Sprintf("collide=%v", collide), func(t *testing.T) {
			const files, max = 300, 50
			e := setup(t, newChecker(), smallInodes(max, func(o *s3mount.Options) {
				if collide {
					s3mount.HashInodes(o, func(string) uint64 { return 42 })
				}
			}))
			e.putMany(t, "job/d", files)
			e.put(t, "job/d/sub/x", "x")
			for round := range 2 {
				d := direntInos(t, e.path("job/d"))
				if len(d) != files+1 {
					t.Fatalf("readdir: %d entries, want %d", len(d), files+1)
				}
				seen := map[uint64]string{}
				for name, dino := range d {
					ino := statIno(t, e.path("job/d/"+name))
					if !collide && ino != dino {
						t.Errorf("round %d: %s: d_ino %d, st_ino %d", round, name, dino, ino)
					}
					if o, dup := seen[ino]; dup && e.m.InodeKnown("job/d/"+o) {
						t.Errorf("round %d: %s and %s (both held) share inode %d", round, name, o, ino)
					}
					seen[ino] = name
				}
			}
		})
	}
}

// TestQueuedDeleteGoneAfterEviction: a name whose deletion is queued stays gone (stat, readdir, rmdir of
// its folder) after the attribute cache evicted everything it said about it and the kernel forgot its
// inode: the state is the queue's, not the cache's.
func TestQueuedDeleteGoneAfterEviction(t *testing.T) {
	g := &gate{}
	dir := t.TempDir()
	const max = 8
	e := setup(t, newChecker(), smallInodes(max, func(o *s3mount.Options) {
		o.Attrs = s3client.NewAttrCache(20)
		o.DeleteQueueDir = dir
		s3mount.TuneQueue(o, func(qo *deleteq.Options) { g.inner = qo.Recheck; qo.Recheck = g })
	}))
	t.Cleanup(g.release)
	e.putMany(t, "job/churn", 60)
	for _, k := range []string{"job/shared/a", "job/shared/b"} {
		e.put(t, k, "v")
	}
	names(t, e.path("job/shared"))
	g.hold()
	for _, n := range []string{"a", "b"} {
		if err := os.Remove(e.path("job/shared/" + n)); err != nil {
			t.Fatal(err)
		}
	}
	names(t, e.path("job/churn")) // 60 listed entries: the cache of 20 evicts
	e.churn(t, "job/churn", 60, max+max/2)
	if !e.exists(t, "job/shared/a") {
		t.Fatal("the queue applied a deletion while held")
	}
	if _, err := os.Stat(e.path("job/shared/a")); !os.IsNotExist(err) {
		t.Errorf("stat of a queued name after eviction: %v, want ENOENT", err)
	}
	if got := names(t, e.path("job/shared")); len(got) != 0 {
		t.Errorf("readdir after eviction shows queued names: %v", got)
	}
	done := make(chan error, 1)
	go func() { done <- syscall.Rmdir(e.path("job/shared")) }()
	select {
	case <-g.entered:
	case err := <-done:
		t.Fatalf("rmdir returned before the queue applied: %v", err)
	}
	g.release()
	if err := <-done; err != nil {
		t.Fatalf("rmdir of a folder whose children are queued: %v", err)
	}
	for _, k := range []string{"job/shared/a", "job/shared/b"} {
		if e.exists(t, k) {
			t.Errorf("%s still in the bucket after rmdir of its folder", k)
		}
	}
	_ = context.Background
	_ = filepath.Join
}
