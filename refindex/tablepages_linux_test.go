//go:build linux

package refindex_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/refindex"
)

// indexResidency sums the Size of this process's mappings of the .sst files under dir and the Rss
// (kB) of its mappings of .sst and .vlog files (/proc/self/smaps): what of the index's tables and
// value log counts in the resident set. (A value log is mapped sparse at twice its file size: its
// Size says nothing.)
func indexResidency(t *testing.T, dir string) (tables, rss int64) {
	t.Helper()
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ext := ""
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) >= 5 && strings.Contains(fs[0], "-") && strings.Contains(fs[3], ":") {
			ext = ""
			if len(fs) >= 6 && strings.HasPrefix(fs[5], dir+"/") {
				ext = filepath.Ext(fs[5])
			}
			continue
		}
		if (ext != ".sst" && ext != ".vlog") || len(fs) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(fs[1], 10, 64)
		switch {
		case fs[0] == "Size:" && ext == ".sst":
			tables += n
		case fs[0] == "Rss:":
			rss += n
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return tables, rss
}

// TestIndexTablesReleasedAfterPasses: once a pass over the index is done (the first build, which
// writes every table through its mapping; a loss-check pass streaming the whole reverse table; a
// sync), the index's pages no longer count in the process's resident set: they stay in the page
// cache, and the mount's RSS is what it holds, not the index on disk. That includes the checkpoints'
// forward references (tens of KB each), written inline in the tables, not through the value log's
// mapping (which stays resident). Counted in pages, not timed.
func TestIndexTablesReleasedAfterPasses(t *testing.T) {
	dir := t.TempDir()
	ix, lr := lossIndex(t, dir, 40, 2000, 500)
	index := filepath.Join(dir, "index")
	check := func(after string) {
		t.Helper()
		tables, rss := indexResidency(t, index)
		t.Logf("after %s (%d referenced objects): tables mapped %d kB; tables and value log resident %d kB", after, lr.Distinct, tables, rss)
		if tables < 1<<10 {
			t.Fatalf("after %s: %d kB of tables mapped; the test needs an index of some MiB", after, tables)
		}
		if rss*10 > tables {
			t.Fatalf("after %s: %d kB of tables and value log resident for %d kB of tables, want at most a tenth", after, rss, tables)
		}
	}
	check("the first build")
	for _, tc := range []struct {
		name string
		opt  refindex.LossCheckOptions
	}{
		{"a whole loss-check pass", refindex.LossCheckOptions{}},
		{"a budgeted pass beginning a rotation (counts the whole table)", refindex.LossCheckOptions{Budget: 500}},
	} {
		lc := ix.NewLossChecker(tc.opt)
		rep, err := lc.Check(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if rep.Objects != lr.Distinct || len(rep.Missing) != 0 {
			t.Fatalf("%s: %d objects, %d missing; want %d, none", tc.name, rep.Objects, len(rep.Missing), lr.Distinct)
		}
		check(tc.name)
	}
	if err := ix.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	check("a sync")
}
