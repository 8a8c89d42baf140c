//go:build linux

package refindex

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	badger "github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/table"
	"golang.org/x/sys/unix"
)

// releaseTablePages drops generation g's table files (.sst, in dir) from this process's resident
// set: madvise(MADV_DONTNEED) on their mappings. badger maps every table MAP_SHARED, so the pages
// stay in the page cache (clean: a table is written and synced once, then only read) and a later
// read faults them back in from there; nothing badger reads can change. Only tables are released:
// the value log and memtable logs are written through their mappings.
//
// Invariant: madvise only ever touches a live table's own mapping. A table's mapping is unmapped
// when its last reference goes (a compaction replaced it, the DB closed), and the address range may
// then be reused by anything, the Go heap included, where MADV_DONTNEED would zero memory. So the
// call holds an iterator over every table (badger takes a reference on each table an iterator
// covers) and releases only tables listed both before and after it was created: those were live
// throughout, so the iterator holds them and their mappings stay put until it is closed. The caller
// holds a user of g (the DB stays open). It returns the bytes of mapping released.
func (g *generation) releaseTablePages(dir string) (int64, error) {
	before := map[uint64]bool{}
	for _, t := range g.db.Tables() {
		before[t.ID] = true
	}
	txn := g.db.NewTransaction(false)
	defer txn.Discard()
	it := txn.NewIterator(badger.IteratorOptions{}) // no prefix: a reference on every table
	defer it.Close()
	held := map[mappedFile]bool{}
	for _, t := range g.db.Tables() {
		if !before[t.ID] {
			continue
		}
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(dir, table.IDToFilename(t.ID)), &st); err != nil {
			continue // not there (removed by now): nothing of it to release
		}
		held[mappedFile{uint64(st.Dev), st.Ino}] = true
	}
	if len(held) == 0 {
		return 0, nil
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0, fmt.Errorf("release index table pages of %s: %w", dir, err)
	}
	defer f.Close()
	var released int64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// start-end perms offset major:minor inode path
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || !strings.HasSuffix(fs[5], ".sst") || len(fs[1]) < 4 || fs[1][3] != 's' {
			continue
		}
		id, ok := mapsFileID(fs[3], fs[4])
		if !ok || !held[id] {
			continue
		}
		lo, hi, ok := strings.Cut(fs[0], "-")
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		if err1 != nil || err2 != nil || end <= start {
			continue
		}
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(start), uintptr(end-start), unix.MADV_DONTNEED); errno != 0 {
			return released, fmt.Errorf("release index table pages of %s: madvise: %w", dir, errno)
		}
		released += int64(end - start)
	}
	if err := sc.Err(); err != nil {
		return released, fmt.Errorf("release index table pages of %s: read /proc/self/maps: %w", dir, err)
	}
	return released, nil
}

// mappedFile names a file by stat(2)'s st_dev and st_ino (what /proc/self/maps shows of a mapping).
type mappedFile struct{ dev, ino uint64 }

// mapsFileID parses the device ("fe:01", hex major:minor) and inode columns of a /proc/self/maps line.
func mapsFileID(dev, ino string) (mappedFile, bool) {
	maj, min, ok := strings.Cut(dev, ":")
	if !ok {
		return mappedFile{}, false
	}
	ma, err1 := strconv.ParseUint(maj, 16, 32)
	mi, err2 := strconv.ParseUint(min, 16, 32)
	n, err3 := strconv.ParseUint(ino, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return mappedFile{}, false
	}
	return mappedFile{unix.Mkdev(uint32(ma), uint32(mi)), n}, true
}
