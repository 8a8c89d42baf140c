//go:build hdfs

package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsguardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
)

// The Go columns of TestHDFSBench: the raw Go client listing the same tree (serially, as `find`
// through the mount walks it, and with hdfsstore's 8 concurrent listings), `find -type f` through the
// ckguard mount, and `rm -rf` of delN unreferenced files through the mount.
func init() { hdfsBenchColumns = append(hdfsBenchColumns, benchGoColumns) }

func benchGoColumns(t *testing.T, b *hdfsBench) {
	ctx := context.Background()
	opts := hdfscli.Options{Timeout: time.Minute}
	cl, res, err := hdfscli.Dial(ctx, b.c.URI(b.listDir), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()

	// Raw: one recursive listing, one directory at a time (what a find through FUSE does).
	n := 0
	var walk func(dir string)
	walk = func(dir string) {
		var sub []string
		if err := cl.List(ctx, dir, func(page []hdfsclient.FileInfo) error {
			for _, fi := range page {
				if fi.IsDir {
					sub = append(sub, dir+"/"+fi.Name)
				} else {
					n++
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		for _, d := range sub {
			walk(d)
		}
	}
	raw := func() time.Duration {
		n = 0
		start := time.Now()
		walk(b.listDir)
		if n != b.n {
			t.Errorf("raw listing saw %d files, want %d", n, b.n)
		}
		return time.Since(start)
	}
	start := time.Now()
	st := hdfsstore.New(cl, res, hdfsstore.Options{})
	m := 0
	if err := st.Walk(ctx, "", func(oi store.ObjectInfo) error {
		if !oi.IsDir {
			m++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	b.list = append(b.list, hdfsBenchFigure{"Go client, hdfsstore walk, 8 listings at once (raw)", time.Since(start)})

	// The mount over the cluster's test directory: list/ for find, del-ckguard/ for rm -rf.
	delDir := b.c.Root() + "/del-ckguard"
	perDir := min(1000, b.delN)
	b.java(t, "mkfiles", delDir, strconv.Itoa((b.delN+perDir-1)/perDir), strconv.Itoa(perDir), "8")
	dir := t.TempDir()
	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	// The benchmark's files were made just now: with the default grace (1h) every one is protected as
	// possibly part of a checkpoint in flight. What is measured is the per-file decision, so no grace.
	pol := refindex.DefaultPolicy()
	pol.Grace = time.Millisecond
	stop := guarddtest.Start(t, guardd.Config{StoreDir: b.c.URI(b.c.Root()), IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol}, func(ctx context.Context, c guardd.Config) error { return hdfsguardd.Run(ctx, c, opts) })
	defer stop()
	// The raw listing and find through the mount alternate, BENCH_HDFS_ROUNDS times (default 3), so
	// both see the same machine; the medians are printed (a loaded machine's figures scatter widely).
	rounds := max(1, envInt("BENCH_HDFS_ROUNDS", 3))
	var raws, finds []time.Duration
	var rawCPU, findCPU []benchCPU
	for i := range rounds {
		if i > 0 {
			time.Sleep(1100 * time.Millisecond) // past the kernel's 1 s entry and attribute caches
		}
		stopProf := benchProfile(t, fmt.Sprintf("raw-%d", i))
		c0 := b.cpu(nil)
		raws = append(raws, raw())
		rawCPU = append(rawCPU, b.cpu(nil).minus(c0))
		stopProf()
		stopProf = benchProfile(t, fmt.Sprintf("find-%d", i))
		c0 = b.cpu(nil)
		start := time.Now()
		cmd := exec.Command("find", filepath.Join(mnt, filepath.Base(b.listDir)), "-type", "f")
		got, err := countLines(cmd)
		if err != nil {
			t.Fatal(err)
		}
		finds = append(finds, time.Since(start))
		findCPU = append(findCPU, b.cpu(cmd).minus(c0))
		stopProf()
		if got != b.n {
			t.Errorf("find through the mount saw %d files, want %d", got, b.n)
		}
	}
	r, f := median(raws), median(finds)
	b.list = append(b.list, hdfsBenchFigure{fmt.Sprintf("Go client, serial recursive listing (raw, median of %d)", rounds), r},
		hdfsBenchFigure{"ckguard mount: find -type f, first run", finds[0]},
		hdfsBenchFigure{fmt.Sprintf("ckguard mount: find -type f (median of %d)", rounds), f})
	t.Logf("find through the mount / raw Go listing: %.2f (medians; rounds: raw %v, find %v)", f.Seconds()/r.Seconds(), raws, finds)
	// CPU spent per round, the machine's load aside: on a busy machine (other processes on both cores)
	// the wall clock approaches the sum of these, however well the mount overlaps its work.
	rc, fc := medianCPU(rawCPU), medianCPU(findCPU)
	t.Logf("CPU per round (medians): raw: Go %v + JVM %v = %v; find: daemon %v + find %v + JVM %v = %v; ratio %.2f",
		rc.self, rc.jvm, rc.total(), fc.self, fc.child, fc.jvm, fc.total(), fc.total().Seconds()/rc.total().Seconds())
	start = time.Now()
	if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, "del-ckguard")).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf of unreferenced files through the mount: %v %s", err, out)
	}
	b.del = append(b.del, hdfsBenchFigure{"ckguard mount: rm -rf (decided per file)", time.Since(start)})
}

// benchCPU is CPU time spent: by this process (the raw listing, or the daemon serving find), by the
// find child, and by the MiniDFSCluster's JVM.
type benchCPU struct{ self, child, jvm time.Duration }

func (c benchCPU) total() time.Duration { return c.self + c.child + c.jvm }
func (c benchCPU) minus(o benchCPU) benchCPU {
	return benchCPU{c.self - o.self, c.child - o.child, c.jvm - o.jvm}
}

// cpu reads the CPU time spent so far by this process and the cluster's JVM, and by cmd when it ran.
func (b *hdfsBench) cpu(cmd *exec.Cmd) benchCPU {
	var c benchCPU
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) == nil {
		c.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	if cmd != nil && cmd.ProcessState != nil {
		c.child = cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	}
	// /proc/PID/stat: utime and stime are fields 14 and 15, in clock ticks (100 a second on Linux).
	if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", b.c.Pid())); err == nil {
		if i := bytes.LastIndexByte(st, ')'); i > 0 {
			f := strings.Fields(string(st[i+1:]))
			if len(f) > 13 {
				u, _ := strconv.ParseInt(f[11], 10, 64)
				s, _ := strconv.ParseInt(f[12], 10, 64)
				c.jvm = time.Duration(u+s) * 10 * time.Millisecond
			}
		}
	}
	return c
}

// medianCPU is the per-column median of cs.
func medianCPU(cs []benchCPU) benchCPU {
	col := func(get func(benchCPU) time.Duration) time.Duration {
		var ds []time.Duration
		for _, c := range cs {
			ds = append(ds, get(c))
		}
		return median(ds)
	}
	return benchCPU{col(func(c benchCPU) time.Duration { return c.self }), col(func(c benchCPU) time.Duration { return c.child }),
		col(func(c benchCPU) time.Duration { return c.jvm })}
}

// countLines runs cmd and counts the lines of its output as they come: the output is read in full, as
// find's is by a shell pipe, but not held (a 5 MB buffer grown in this process, the daemon's, was
// charged to the mount's find).
func countLines(cmd *exec.Cmd) (int, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n := 0
	buf := make([]byte, 64<<10)
	for {
		m, rerr := out.Read(buf)
		n += bytes.Count(buf[:m], []byte{'\n'})
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			_ = cmd.Wait()
			return n, rerr
		}
	}
	return n, cmd.Wait()
}

// benchProfile writes a CPU profile of this process (the raw listing, or the daemon serving find)
// to $BENCH_HDFS_CPUPROFILE-name.pprof until the returned func is called; nothing when unset.
func benchProfile(t *testing.T, name string) func() {
	prefix := os.Getenv("BENCH_HDFS_CPUPROFILE")
	if prefix == "" {
		return func() {}
	}
	f, err := os.Create(prefix + "-" + name + ".pprof")
	if err != nil {
		t.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			t.Error(err)
		}
	}
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}
