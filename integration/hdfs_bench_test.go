//go:build hdfs

package integration

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// TestHDFSBench is the HDFS benchmark of scripts/bench-hdfs.sh (skipped unless CKGUARD_BENCH_HDFS=1),
// side by side on one MiniDFSCluster in one run:
//
//   - listing BENCH_HDFS_FILES (100,000) files: `hdfs dfs -ls -R` (Hadoop's FsShell in a JVM of its own,
//     wall clock as an operator sees it, and the same inside a warm JVM) and FileSystem.listFiles;
//   - deleting BENCH_HDFS_DEL_N (10,000) files: a Java program calling FileSystem.delete on each file
//     one by one in one warm JVM (the per-file floor a guard deciding per file can approach), and
//     `hdfs dfs -rm -r -skipTrash` of their folder (one recursive, undecided RPC: the lower bound).
//
// The files are empty (no blocks: the figures are the NameNode's namespace work, which is what listing
// and deletion cost). Columns measured by Go code (the mount, the raw Go client) register in
// hdfsBenchColumns and are printed with ratios to the Java figures.
func TestHDFSBench(t *testing.T) {
	if os.Getenv("CKGUARD_BENCH_HDFS") == "" {
		t.Skip("benchmark: set CKGUARD_BENCH_HDFS=1 (scripts/bench-hdfs.sh)")
	}
	n := envInt("BENCH_HDFS_FILES", 100000)
	delN := envInt("BENCH_HDFS_DEL_N", 10000)
	c := minidfs.Start(t, minidfs.Options{})
	b := &hdfsBench{c: c, listDir: c.Root() + "/list", n: n, delN: delN}
	t.Logf("MiniDFSCluster up in %s at %s; load average %s", c.StartTime().Round(100*time.Millisecond), c.URI(""), hdfsBenchLoad())

	perDir := 1000
	dirs := (n + perDir - 1) / perDir
	r := b.java(t, "mkfiles", b.listDir, strconv.Itoa(dirs), strconv.Itoa(perDir), "8")
	t.Logf("setup: %d empty files in %d folders in %s (8 threads, %.0f files/s)", r.n, dirs, r.d.Round(time.Millisecond), float64(r.n)/r.d.Seconds())

	// Listing.
	start := time.Now()
	r = b.java(t, "shell", "-ls", "-R", b.listDir)
	wall := time.Since(start)
	b.list = append(b.list, hdfsBenchFigure{"hdfs dfs -ls -R (FsShell, inside the JVM)", r.d})
	b.list = append(b.list, hdfsBenchFigure{"hdfs dfs -ls -R (FsShell, own JVM, wall clock)", wall})
	r = b.java(t, "list", b.listDir)
	if r.n != int64(n) {
		t.Errorf("FileSystem.listFiles saw %d files, want %d", r.n, n)
	}
	b.list = append(b.list, hdfsBenchFigure{"FileSystem.listFiles recursive (Java API)", r.d})

	// Deletion: the same number of files in two folders of their own, one per Java tool.
	delDirs := (delN + perDir - 1) / perDir
	delPer := min(perDir, delN)
	perFile := c.Root() + "/del-java"
	rmr := c.Root() + "/del-rmr"
	for _, d := range []string{perFile, rmr} {
		b.java(t, "mkfiles", d, strconv.Itoa(delDirs), strconv.Itoa(delPer), "8")
	}
	listFile := filepath.Join(t.TempDir(), "paths")
	b.writePaths(t, listFile, perFile, delDirs, delPer)
	r = b.java(t, "delete", listFile)
	b.del = append(b.del, hdfsBenchFigure{"FileSystem.delete per file (one warm JVM)", r.d})
	start = time.Now()
	r = b.java(t, "shell", "-rm", "-r", "-skipTrash", rmr)
	wall = time.Since(start)
	b.del = append(b.del, hdfsBenchFigure{"hdfs dfs -rm -r -skipTrash (inside the JVM; lower bound)", r.d})
	b.del = append(b.del, hdfsBenchFigure{"hdfs dfs -rm -r -skipTrash (own JVM, wall clock)", wall})

	for _, col := range hdfsBenchColumns {
		col(t, b)
	}
	b.print(t)
}

// hdfsBenchColumns are the benchmark's Go columns (the ckguard mount, the raw Go client): each runs
// against b.c after the Java figures, on its own files, and appends to b.list / b.del. Its names
// starting with "ckguard" are printed as ratios to the Java per-file floor and the Java CLI.
var hdfsBenchColumns []func(t *testing.T, b *hdfsBench)

// hdfsBench holds one run's figures.
type hdfsBench struct {
	c       *minidfs.Cluster
	listDir string // BENCH_HDFS_FILES empty files, dNNNNN/fNNNNNNN, 1,000 per folder
	n, delN int
	list    []hdfsBenchFigure // time to list n files
	del     []hdfsBenchFigure // time to delete delN files
}

type hdfsBenchFigure struct {
	what string
	d    time.Duration
}

type hdfsBenchResult struct {
	n int64
	d time.Duration
}

// java runs io.ckguard.minidfs.Bench against the cluster in a JVM of its own and parses its BENCH line.
func (b *hdfsBench) java(t *testing.T, op string, args ...string) hdfsBenchResult {
	t.Helper()
	cmd := minidfs.JavaCmd(t, "io.ckguard.minidfs.Bench", append([]string{b.c.URI(""), op}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(interface{ Stderr() []byte }); ok {
			stderr = string(ee.Stderr())
		}
		t.Fatalf("Bench %s %v: %v\n%s%s", op, args, err, out, stderr)
	}
	for _, l := range strings.Split(string(out), "\n") {
		f, ok := strings.CutPrefix(l, "BENCH ")
		if !ok {
			continue
		}
		var r hdfsBenchResult
		for _, kv := range strings.Fields(f) {
			k, v, _ := strings.Cut(kv, "=")
			switch k {
			case "n":
				r.n, _ = strconv.ParseInt(v, 10, 64)
			case "ms":
				ms, _ := strconv.ParseFloat(v, 64)
				r.d = time.Duration(ms * float64(time.Millisecond))
			}
		}
		return r
	}
	t.Fatalf("Bench %s: no BENCH line in %q", op, out)
	return hdfsBenchResult{}
}

// writePaths writes the paths mkfiles created below root, one a line.
func (b *hdfsBench) writePaths(t *testing.T, file, root string, dirs, perDir int) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	w := bufio.NewWriter(f)
	for d := 0; d < dirs; d++ {
		for i := 0; i < perDir; i++ {
			fmt.Fprintf(w, "%s/d%05d/f%07d\n", root, d, d*perDir+i)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// print writes both tables, each figure with its rate and its ratio to the table's first line's
// reference (listing: the FsShell CLI in its own JVM; deletion: the per-file Java floor).
func (b *hdfsBench) print(t *testing.T) {
	t.Helper()
	table := func(title string, n int, figs []hdfsBenchFigure, ref string) {
		var refD time.Duration
		for _, f := range figs {
			if f.what == ref {
				refD = f.d
			}
		}
		t.Logf("== %s (%d files; ratio to %q)", title, n, ref)
		for _, f := range figs {
			ratio := ""
			if refD > 0 {
				ratio = fmt.Sprintf("  %.2fx", f.d.Seconds()/refD.Seconds())
			}
			t.Logf("  %-62s %10s  %9.0f files/s%s", f.what, f.d.Round(time.Millisecond), float64(n)/f.d.Seconds(), ratio)
		}
	}
	t.Logf("load average at the end: %s (a figure taken on a busy machine measures the machine)", hdfsBenchLoad())
	table("listing", b.n, b.list, "hdfs dfs -ls -R (FsShell, own JVM, wall clock)")
	table("deletion", b.delN, b.del, "FileSystem.delete per file (one warm JVM)")
}

// hdfsBenchLoad is the 1/5/15-minute load average, printed with the figures.
func hdfsBenchLoad() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
