// Package hdfsfake is an in-process HDFS namespace behind hdfsclient.FS for fast unit tests: files and
// directories in memory with HDFS's rules (non-recursive remove, rename onto an existing name refused by
// the FS contract, parents must exist), paged listings, and a fault hook that answers any call with an
// error (safe mode, standby, RPC failure). Real-cluster tests use hdfstest/minidfs.
package hdfsfake

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"path"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

type node struct {
	id    uint64 // inode id (from 16386, as the NameNode's first inode after the root)
	dir   bool
	data  []byte
	mtime time.Time
	perm  fs.FileMode
}

// FS is the fake. The zero value is not usable; call New.
type FS struct {
	mu    sync.Mutex
	nodes map[string]*node
	ids   uint64 // last inode id given
	user  string
	// PageSize is the listing page (default 1000, as dfs.ls.limit).
	PageSize int
	// Trash is the reported fs.trash.interval.
	Trash time.Duration
	// fault is the hook SetFault sets; under mu, so a test may change it while a mount is calling.
	fault func(op, name string) error
	// Now stamps modification times (default time.Now).
	Now func() time.Time
	// Calls counts calls per op.
	Calls map[string]int
	// MaxItems, when > 0, is dfs.namenode.fs-limits.max-directory-items: a create, mkdir or rename
	// into a directory holding that many entries fails (MaxDirectoryItemsExceededException, which the
	// client reports as ErrUnavailable).
	MaxItems int
	// Capacity is the cluster's size in bytes Space reports (replication 1): free is Capacity minus
	// every file's bytes; SpaceQuota, when > 0, is the space quota of every directory Space is asked
	// about. Capacity 0: Space fails (no DataNodes).
	Capacity, SpaceQuota int64
}

var (
	_ hdfsclient.FS     = (*FS)(nil)
	_ hdfsclient.Spacer = (*FS)(nil)
)

// New returns an empty namespace (only "/") acting as user.
func New(user string) *FS {
	return &FS{nodes: map[string]*node{"/": {id: 16385, dir: true, perm: 0o755}}, ids: 16385, user: user, PageSize: 1000, Now: time.Now, Calls: map[string]int{}}
}

// SetFault sets the hook asked before every call (nil: none); a non-nil error it returns is the call's
// answer, wrapped as the real client wraps it, so hdfsclient.Errno classifies it the same way. It may be
// called while the fake is in use (a mount serving requests): the hook is read under the fake's lock, so
// every call that starts after SetFault returns sees the new hook. The hook runs without that lock and
// from many goroutines at once; it must synchronise what it shares.
func (f *FS) SetFault(fn func(op, name string) error) {
	f.mu.Lock()
	f.fault = fn
	f.mu.Unlock()
}

func (f *FS) User() string { return f.user }
func (f *FS) Close() error { return nil }

func perr(op, name string, class error) error {
	return &hdfsclient.Error{Op: op, Path: name, Class: class, Err: class}
}

// enter checks the context and the fault hook; the caller holds no lock.
func (f *FS) enter(ctx context.Context, op, name string) error {
	if err := ctx.Err(); err != nil {
		return perr(op, name, err)
	}
	f.mu.Lock()
	f.Calls[op]++
	fault := f.fault
	f.mu.Unlock()
	if fault != nil {
		if err := fault(op, name); err != nil {
			return &hdfsclient.Error{Op: op, Path: name, Class: err, Err: err}
		}
	}
	return nil
}

func clean(name string) string { return path.Clean("/" + name) }

// resolve is name cleaned, a reserved inode path (hdfsclient.InodePath, and names below it) replaced
// by the inode's current path; the caller holds f.mu. An unknown inode resolves to a path that does
// not exist.
func (f *FS) resolve(name string) string {
	name = clean(name)
	const reserved = "/.reserved/.inodes/"
	if !strings.HasPrefix(name, reserved) {
		return name
	}
	idStr, rest, _ := strings.Cut(name[len(reserved):], "/")
	for p, n := range f.nodes {
		if strconv.FormatUint(n.id, 10) == idStr {
			if rest == "" {
				return p
			}
			return path.Join(p, rest)
		}
	}
	return name
}

// newNode gives n the next inode id.
func (f *FS) newNode(n *node) *node {
	f.ids++
	n.id = f.ids
	return n
}

func (f *FS) info(name string, n *node) hdfsclient.FileInfo {
	fi := hdfsclient.FileInfo{Name: path.Base(name), ModTime: n.mtime, IsDir: n.dir, Mode: n.perm, Owner: f.user, Group: "supergroup", ID: n.id}
	if name == "/" {
		fi.Name = ""
	}
	if !n.dir {
		fi.Size = int64(len(n.data))
	}
	return fi
}

func (f *FS) Stat(ctx context.Context, name string) (hdfsclient.FileInfo, error) {
	if err := f.enter(ctx, "stat", name); err != nil {
		return hdfsclient.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	n, ok := f.nodes[name]
	if !ok {
		return hdfsclient.FileInfo{}, perr("stat", name, fs.ErrNotExist)
	}
	return f.info(name, n), nil
}

func (f *FS) children(dir string) []string {
	prefix := strings.TrimSuffix(dir, "/") + "/"
	var out []string
	for k := range f.nodes {
		if k != "/" && strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// List pages like getListing: each page starts after the last name of the previous one, so entries
// added or removed meanwhile are seen or not, but nothing present throughout is skipped.
func (f *FS) List(ctx context.Context, name string, fn func([]hdfsclient.FileInfo) error) error {
	f.mu.Lock()
	name = f.resolve(name)
	f.mu.Unlock()
	after := ""
	for {
		if err := f.enter(ctx, "list", name); err != nil {
			return err
		}
		f.mu.Lock()
		n, ok := f.nodes[name]
		if !ok || !n.dir {
			f.mu.Unlock()
			if !ok {
				return perr("list", name, fs.ErrNotExist)
			}
			return perr("list", name, fs.ErrInvalid)
		}
		var page []hdfsclient.FileInfo
		more := false
		for _, c := range f.children(name) {
			if path.Base(c) <= after && after != "" {
				continue
			}
			if len(page) == f.PageSize {
				more = true
				break
			}
			page = append(page, f.info(c, f.nodes[c]))
		}
		f.mu.Unlock()
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
			after = page[len(page)-1].Name
		}
		if !more {
			return nil
		}
	}
}

type reader struct{ r *bytes.Reader }

func (r reader) ReadAt(p []byte, off int64) (int, error) { return r.r.ReadAt(p, off) }
func (r reader) Close() error                            { return nil }
func (r reader) Size() int64                             { return r.r.Size() }

func (f *FS) Open(ctx context.Context, name string) (hdfsclient.Reader, error) {
	if err := f.enter(ctx, "open", name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	n, ok := f.nodes[name]
	switch {
	case !ok:
		return nil, perr("open", name, fs.ErrNotExist)
	case n.dir:
		return nil, perr("open", name, fs.ErrInvalid)
	}
	return reader{bytes.NewReader(n.data)}, nil
}

type writer struct {
	f    *FS
	name string
	buf  bytes.Buffer
}

func (w *writer) Write(p []byte) (int, error) { return w.buf.Write(p) }

// Close publishes the content (HDFS readers see a file's data up to the last completed block; the fake
// shows all of it at close).
func (w *writer) Close() error {
	w.f.mu.Lock()
	defer w.f.mu.Unlock()
	if n, ok := w.f.nodes[w.name]; ok {
		n.data = append([]byte(nil), w.buf.Bytes()...)
		n.mtime = w.f.Now()
	}
	return nil
}

func (f *FS) parentDir(op, name string) error {
	p, ok := f.nodes[path.Dir(name)]
	if !ok {
		return perr(op, name, fs.ErrNotExist)
	}
	if !p.dir {
		return perr(op, name, syscall.ENOTDIR)
	}
	if f.MaxItems > 0 && len(f.children(path.Dir(name))) >= f.MaxItems {
		return &hdfsclient.Error{Op: op, Path: name, Class: hdfsclient.ErrUnavailable,
			Err: fmt.Errorf("MaxDirectoryItemsExceededException: the directory item limit of %s is exceeded: limit=%d", path.Dir(name), f.MaxItems)}
	}
	return nil
}

func (f *FS) Create(ctx context.Context, name string, perm fs.FileMode) (hdfsclient.Writer, error) {
	if err := f.enter(ctx, "create", name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	if _, ok := f.nodes[name]; ok {
		return nil, perr("create", name, fs.ErrExist)
	}
	if err := f.parentDir("create", name); err != nil {
		return nil, err
	}
	f.nodes[name] = f.newNode(&node{mtime: f.Now(), perm: perm.Perm()})
	return &writer{f: f, name: name}, nil
}

// Append continues an existing file: the writer starts from its content and publishes all of it at
// Close.
func (f *FS) Append(ctx context.Context, name string) (hdfsclient.Writer, error) {
	if err := f.enter(ctx, "append", name); err != nil {
		return nil, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = clean(name)
	n, ok := f.nodes[name]
	if !ok {
		return nil, perr("append", name, fs.ErrNotExist)
	}
	if n.dir {
		return nil, perr("append", name, fs.ErrInvalid)
	}
	w := &writer{f: f, name: name}
	w.buf.Write(n.data)
	return w, nil
}

func (f *FS) Mkdir(ctx context.Context, name string, perm fs.FileMode) error {
	if err := f.enter(ctx, "mkdir", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	if _, ok := f.nodes[name]; ok {
		return perr("mkdir", name, fs.ErrExist)
	}
	if err := f.parentDir("mkdir", name); err != nil {
		return err
	}
	f.nodes[name] = f.newNode(&node{dir: true, mtime: f.Now(), perm: perm.Perm()})
	return nil
}

func (f *FS) MkdirAll(ctx context.Context, name string, perm fs.FileMode) error {
	if err := f.enter(ctx, "mkdirs", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	var todo []string
	for p := name; ; p = path.Dir(p) {
		n, ok := f.nodes[p]
		if ok {
			if !n.dir {
				return perr("mkdirs", p, syscall.ENOTDIR)
			}
			break
		}
		todo = append(todo, p)
	}
	for _, p := range todo {
		f.nodes[p] = f.newNode(&node{dir: true, mtime: f.Now(), perm: perm.Perm()})
	}
	return nil
}

func (f *FS) Remove(ctx context.Context, name string) error {
	if err := f.enter(ctx, "delete", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	n, ok := f.nodes[name]
	if !ok {
		return perr("delete", name, fs.ErrNotExist)
	}
	if n.dir && len(f.children(name)) > 0 {
		return perr("delete", name, syscall.ENOTEMPTY)
	}
	if name == "/" {
		return perr("delete", name, fs.ErrPermission)
	}
	delete(f.nodes, name)
	return nil
}

func (f *FS) Rename(ctx context.Context, from, to string) error {
	if err := f.enter(ctx, "rename", from); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	from, to = f.resolve(from), f.resolve(to)
	if _, ok := f.nodes[from]; !ok {
		return perr("rename", from, fs.ErrNotExist)
	}
	if _, ok := f.nodes[to]; ok {
		return perr("rename", to, fs.ErrExist)
	}
	if to == from || strings.HasPrefix(to, from+"/") {
		return perr("rename", to, fs.ErrInvalid)
	}
	if err := f.parentDir("rename", to); err != nil {
		return err
	}
	moved := map[string]*node{}
	for k, n := range f.nodes {
		if k == from || strings.HasPrefix(k, from+"/") {
			moved[to+k[len(from):]] = n
			delete(f.nodes, k)
		}
	}
	for k, n := range moved {
		f.nodes[k] = n
	}
	return nil
}

func (f *FS) Chtimes(ctx context.Context, name string, mtime time.Time) error {
	if err := f.enter(ctx, "setTimes", name); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[f.resolve(name)]
	if !ok {
		return perr("setTimes", name, fs.ErrNotExist)
	}
	n.mtime = mtime
	return nil
}

func (f *FS) Defaults(ctx context.Context) (hdfsclient.Defaults, error) {
	if err := f.enter(ctx, "getServerDefaults", "/"); err != nil {
		return hdfsclient.Defaults{}, err
	}
	return hdfsclient.Defaults{TrashInterval: f.Trash}, nil
}

// Space reports dir's room from Capacity, SpaceQuota and the bytes of the files held.
func (f *FS) Space(ctx context.Context, dir string) (hdfsclient.Room, error) {
	if err := f.enter(ctx, "getContentSummary", dir); err != nil {
		return hdfsclient.Room{}, err
	}
	f.mu.Lock()
	var all, below int64
	prefix := strings.TrimSuffix(dir, "/") + "/"
	for name, n := range f.nodes {
		if n.dir {
			continue
		}
		all += int64(len(n.data))
		if strings.HasPrefix(name, prefix) {
			below += int64(len(n.data))
		}
	}
	c, q := f.Capacity, f.SpaceQuota
	f.mu.Unlock()
	return hdfsclient.RoomOf(hdfsclient.RawSpace{Capacity: c, Remaining: c - all, Length: below, Consumed: below, SpaceQuota: q, DefaultReplication: 1})
}

// Put creates name with data and mtime, creating parents (test setup; no fault hook).
func (f *FS) Put(name string, data []byte, mtime time.Time) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	name = f.resolve(name)
	for p := path.Dir(name); ; p = path.Dir(p) {
		n, ok := f.nodes[p]
		if ok {
			if !n.dir {
				return fmt.Errorf("put %s: %s is a file", name, p)
			}
			break
		}
		f.nodes[p] = f.newNode(&node{dir: true, mtime: mtime, perm: 0o755})
	}
	if n, ok := f.nodes[name]; ok && n.dir {
		return fmt.Errorf("put %s: is a directory", name)
	}
	f.nodes[name] = f.newNode(&node{data: append([]byte(nil), data...), mtime: mtime, perm: 0o644})
	return nil
}

// Files returns every file path, sorted (test assertions).
func (f *FS) Files() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for k, n := range f.nodes {
		if !n.dir {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// ReadFile returns a file's content (test assertions).
func (f *FS) ReadFile(name string) ([]byte, error) {
	r, err := f.Open(context.Background(), name)
	if err != nil {
		return nil, err
	}
	return io.ReadAll(io.NewSectionReader(r, 0, r.Size()))
}
