package localfs

import (
	"context"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"
)

// orderedDir is a directory handle that lists entries in cleanup order. It reads the whole directory on the
// first read (the order needs to know every name), then serves entries from memory; offsets are positions in
// that list, so seekdir/telldir work, and rewinddir (seek to 0) re-reads the directory.
type orderedDir struct {
	mu      sync.Mutex
	path    string
	entries []fuse.DirEntry
	loaded  bool
	pos     int
}

var (
	_ fs.FileReaddirenter = (*orderedDir)(nil)
	_ fs.FileSeekdirer    = (*orderedDir)(nil)
	_ fs.FileReleasedirer = (*orderedDir)(nil)
	_ fs.FileFsyncdirer   = (*orderedDir)(nil)
)

func openOrderedDir(path string) (*orderedDir, syscall.Errno) {
	// Open once now so permission and existence errors surface at opendir, as on a plain directory.
	fd, err := unix.Open(path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	unix.Close(fd)
	return &orderedDir{path: path}, 0
}

func (d *orderedDir) load() syscall.Errno {
	fd, err := unix.Open(d.path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer unix.Close(fd)
	var entries []fuse.DirEntry
	buf := make([]byte, 64<<10)
	for {
		n, err := unix.Getdents(fd, buf)
		if err != nil {
			return fs.ToErrno(err)
		}
		if n <= 0 {
			break
		}
		b := buf[:n]
		for len(b) > 0 {
			var e fuse.DirEntry
			used := e.Parse(b)
			if used <= 0 {
				break
			}
			b = b[used:]
			entries = append(entries, e)
		}
	}
	entries = orderEntries(entries)
	for i := range entries {
		entries[i].Off = uint64(i + 1)
	}
	d.entries, d.loaded, d.pos = entries, true, 0
	return 0
}

func (d *orderedDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.loaded {
		if errno := d.load(); errno != 0 {
			return nil, errno
		}
	}
	if d.pos >= len(d.entries) {
		return nil, 0
	}
	e := d.entries[d.pos]
	d.pos++
	return &e, 0
}

func (d *orderedDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if off == 0 {
		return d.load()
	}
	if !d.loaded {
		if errno := d.load(); errno != 0 {
			return errno
		}
	}
	if off > uint64(len(d.entries)) {
		off = uint64(len(d.entries))
	}
	d.pos = int(off)
	return 0
}

func (d *orderedDir) Releasedir(ctx context.Context, flags uint32) {
	d.mu.Lock()
	d.entries = nil
	d.mu.Unlock()
}

func (d *orderedDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	fd, err := unix.Open(d.path, unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fs.ToErrno(err)
	}
	defer unix.Close(fd)
	return fs.ToErrno(unix.Fsync(fd))
}

// orderEntries puts a directory in cleanup order: "." and "..", then _metadata, then chk-N folders newest
// (highest N) first, then everything else in the directory's own order.
//
// Why: recursive deleters (GNU rm's fts, find -delete, shutil.rmtree) process entries in the order readdir
// returns them. _metadata first retires a checkpoint before its own files are reached. Newest checkpoint
// first, because a checkpoint can only reference files that existed when it was taken, i.e. files of itself
// or of older checkpoints: retiring the newest first frees what it borrowed from older ones before those are
// reached, so one pass deletes everything policy allows. shared/, taskowned/ and the rest come last, after
// every checkpoint of the folder is retired.
//
// The partition is stable and O(n) apart from sorting the chk-* names, so huge shared/ folders cost no
// more than reading them.
func orderEntries(in []fuse.DirEntry) []fuse.DirEntry {
	out := make([]fuse.DirEntry, 0, len(in))
	var chk []fuse.DirEntry
	var meta []fuse.DirEntry
	for _, e := range in {
		switch {
		case e.Name == "." || e.Name == "..":
			out = append(out, e)
		case e.Name == "_metadata":
			meta = append(meta, e)
		case strings.HasPrefix(e.Name, "chk-"):
			chk = append(chk, e)
		}
	}
	sort.SliceStable(chk, func(i, j int) bool {
		a, aok := chkNumber(chk[i].Name)
		b, bok := chkNumber(chk[j].Name)
		switch {
		case aok && bok:
			return a > b
		case aok != bok:
			return aok // numbered checkpoints before odd names
		}
		return chk[i].Name < chk[j].Name
	})
	out = append(out, meta...)
	out = append(out, chk...)
	for _, e := range in {
		if e.Name == "." || e.Name == ".." || e.Name == "_metadata" || strings.HasPrefix(e.Name, "chk-") {
			continue
		}
		out = append(out, e)
	}
	return out
}

func chkNumber(name string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimPrefix(name, "chk-"), 10, 64)
	return n, err == nil && n >= 0
}
