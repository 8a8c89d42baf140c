package localfs

import (
	"context"
	"sync"
	"syscall"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/listorder"
	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// orderedDir is a directory handle that lists entries in cleanup order (see listorder.Order) without holding
// the directory in memory: a first pass over the directory keeps only the entries that must come first
// (".", "..", _metadata, chk-*), which are served sorted; a second pass then streams everything else in the
// directory's own order (from the first pass's buffer when one read held the whole directory). Memory is bounded by the number of checkpoint folders, not by the size of a
// 100,000-file shared/ folder. Offsets are positions in the listing, so telldir/seekdir work (a seek into the
// streamed part re-reads up to that position), and rewinddir (seek to 0) starts over with a fresh first pass.
type orderedDir struct {
	n     *node // the folder (lookups of READDIRPLUS make its children)
	mu    sync.Mutex
	fd    int // -1 once released
	buf   []byte
	todo  []byte // unparsed getdents output of the streaming pass
	first []fuse.DirEntry
	// emitted are the names served from first; the streaming pass skips exactly those (an entry created
	// in between is then listed once, in the streamed part).
	emitted map[string]bool
	pos     uint64 // entries served so far (= the offset of the next one)
	eof     bool
	// whole is set when the first pass got the entire directory in one getdents call (up to 64 KiB of
	// entries, about 2,000 names): todo then holds it, and the streaming pass serves it without reading
	// the directory a second time (a third of the daemon's work per file in find and rm -rf of 1,000-file
	// folders went to reading each folder twice).
	whole bool
	probe []byte // the first pass's second read, which finds the end: it must not overwrite buf
	// root is set on the store root's listing, which never shows the quarantine folder.
	root bool
}

var (
	_ fs.FileReaddirenter = (*orderedDir)(nil)
	_ fs.FileSeekdirer    = (*orderedDir)(nil)
	_ fs.FileReleasedirer = (*orderedDir)(nil)
	_ fs.FileFsyncdirer   = (*orderedDir)(nil)
)

// openOrderedDir opens folder key beneath the store root (no symlink on the way: a folder swapped for one
// is not listed through the mount).
func openOrderedDir(n *node) (*orderedDir, syscall.Errno) {
	// Open now so permission and existence errors surface at opendir, as on a plain directory.
	fd, err := n.root.open(n.key(), unix.O_DIRECTORY|unix.O_RDONLY, 0)
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	return &orderedDir{n: n, fd: fd, buf: make([]byte, 64<<10), root: n.key() == ""}, 0
}

// isFirst reports whether an entry belongs to the sorted head of the listing.
func isFirst(name string) bool {
	return flinklayout.Class(name) < 3
}

// start runs the first pass and rewinds for the streaming pass.
func (d *orderedDir) start() syscall.Errno {
	if _, err := unix.Seek(d.fd, 0, 0); err != nil {
		return fs.ToErrno(err)
	}
	var first []fuse.DirEntry
	reads, size := 0, 0
	for {
		buf := d.buf
		if reads == 1 {
			// Keep the first read intact: if this one finds the end, that read was the whole directory.
			if d.probe == nil {
				d.probe = make([]byte, 8<<10) // room for any entry; usually it only finds the end
			}
			buf = d.probe
		}
		n, err := unix.Getdents(d.fd, buf)
		if err != nil {
			return fs.ToErrno(err)
		}
		if n <= 0 {
			break
		}
		reads++
		if reads == 1 {
			size = n
		}
		for b := buf[:n]; len(b) > 0; {
			var e fuse.DirEntry
			used := e.Parse(b)
			if used <= 0 {
				break
			}
			b = b[used:]
			if isFirst(e.Name) {
				first = append(first, e)
			}
		}
	}
	d.first = listorder.Order(first)
	d.emitted = make(map[string]bool, len(d.first))
	for _, e := range d.first {
		d.emitted[e.Name] = true
	}
	d.pos, d.eof = 0, false
	if reads == 1 {
		d.todo, d.whole = d.buf[:size], true
		return 0
	}
	if _, err := unix.Seek(d.fd, 0, 0); err != nil {
		return fs.ToErrno(err)
	}
	d.todo, d.whole = nil, false
	return 0
}

// next returns the next entry of the listing, or nil at the end.
func (d *orderedDir) next() (*fuse.DirEntry, syscall.Errno) {
	if d.first == nil && d.emitted == nil {
		if errno := d.start(); errno != 0 {
			return nil, errno
		}
	}
	if d.pos < uint64(len(d.first)) {
		e := d.first[d.pos]
		d.pos++
		e.Off = d.pos
		return &e, 0
	}
	for !d.eof {
		if len(d.todo) == 0 {
			if d.whole {
				d.eof = true
				break
			}
			n, err := unix.Getdents(d.fd, d.buf)
			if err != nil {
				return nil, fs.ToErrno(err)
			}
			if n <= 0 {
				d.eof = true
				break
			}
			d.todo = d.buf[:n]
		}
		var e fuse.DirEntry
		used := e.Parse(d.todo)
		if used <= 0 {
			d.todo = nil
			continue
		}
		d.todo = d.todo[used:]
		if d.emitted[e.Name] || d.root && guard.ReservedName("", e.Name) {
			continue
		}
		d.pos++
		e.Off = d.pos
		return &e, 0
	}
	return nil, 0
}

func (d *orderedDir) Readdirent(ctx context.Context) (*fuse.DirEntry, syscall.Errno) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return nil, syscall.EBADF
	}
	return d.next()
}

func (d *orderedDir) Seekdir(ctx context.Context, off uint64) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return syscall.EBADF
	}
	if off == 0 || off < d.pos || d.emitted == nil {
		// Backwards (or rewinddir): start over; rewinddir also sees changes made since opendir.
		if errno := d.start(); errno != 0 {
			return errno
		}
	}
	for d.pos < off {
		e, errno := d.next()
		if errno != 0 {
			return errno
		}
		if e == nil {
			break
		}
	}
	return 0
}

func (d *orderedDir) Releasedir(ctx context.Context, flags uint32) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd >= 0 {
		unix.Close(d.fd)
		d.fd = -1
	}
	d.n.openDir.CompareAndSwap(d, nil)
	d.first, d.emitted, d.todo, d.buf, d.probe = nil, nil, nil, nil, nil
}

func (d *orderedDir) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fd < 0 {
		return syscall.EBADF
	}
	return fs.ToErrno(unix.Fsync(d.fd))
}
