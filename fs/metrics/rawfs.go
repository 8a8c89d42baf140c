package metrics

import (
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"github.com/prometheus/client_golang/prometheus"
)

// InstrumentRawFS wraps a go-fuse RawFileSystem so that the time spent answering each request lands in the
// ckguard_fuse_op_duration_seconds histogram. Measuring at this layer covers every operation, guarded or not,
// in one place. Reads and writes that the kernel serves through FUSE passthrough never reach the daemon and so
// are (correctly) not counted.
func (m *Metrics) InstrumentRawFS(fs fuse.RawFileSystem) fuse.RawFileSystem {
	obs := func(op string) prometheus.Observer { return m.fuseLatency.WithLabelValues(op) }
	return &timedFS{RawFileSystem: fs, m: m,
		lookup: obs("lookup"), getattr: obs("getattr"), setattr: obs("setattr"), mknod: obs("mknod"),
		mkdir: obs("mkdir"), unlink: obs("unlink"), rmdir: obs("rmdir"), rename: obs("rename"),
		link: obs("link"), symlink: obs("symlink"), readlink: obs("readlink"), access: obs("access"),
		getxattr: obs("getxattr"), listxattr: obs("listxattr"), setxattr: obs("setxattr"),
		removexattr: obs("removexattr"), create: obs("create"), open: obs("open"), read: obs("read"),
		write: obs("write"), flush: obs("flush"), fsync: obs("fsync"), release: obs("release"),
		opendir: obs("opendir"), readdir: obs("readdir"), readdirplus: obs("readdirplus"),
		releasedir: obs("releasedir"), statfs: obs("statfs"), statx: obs("statx"),
	}
}

type timedFS struct {
	fuse.RawFileSystem
	m *Metrics
	lookup, getattr, setattr, mknod, mkdir, unlink, rmdir, rename, link, symlink, readlink, access,
	getxattr, listxattr, setxattr, removexattr, create, open, read, write, flush, fsync, release,
	opendir, readdir, readdirplus, releasedir, statfs, statx prometheus.Observer
}

// begin counts a request in (and as overlapped when another is being answered) and returns its start.
func (t *timedFS) begin() time.Time {
	if t.m.inflight.Add(1) > 1 {
		t.m.overlapped.Add(1)
	}
	t.m.begun.Add(1)
	return time.Now()
}

// end counts the request out and observes its duration.
func (t *timedFS) end(o prometheus.Observer, start time.Time) {
	t.m.inflight.Add(-1)
	o.Observe(time.Since(start).Seconds())
}

func (t *timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer t.end(t.lookup, t.begin())
	return t.RawFileSystem.Lookup(c, h, name, out)
}
func (t *timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.end(t.getattr, t.begin())
	return t.RawFileSystem.GetAttr(c, in, out)
}
func (t *timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer t.end(t.setattr, t.begin())
	return t.RawFileSystem.SetAttr(c, in, out)
}
func (t *timedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.end(t.mknod, t.begin())
	return t.RawFileSystem.Mknod(c, in, name, out)
}
func (t *timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.end(t.mkdir, t.begin())
	return t.RawFileSystem.Mkdir(c, in, name, out)
}
func (t *timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.end(t.unlink, t.begin())
	return t.RawFileSystem.Unlink(c, h, name)
}
func (t *timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer t.end(t.rmdir, t.begin())
	return t.RawFileSystem.Rmdir(c, h, name)
}
func (t *timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer t.end(t.rename, t.begin())
	return t.RawFileSystem.Rename(c, in, from, to)
}
func (t *timedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer t.end(t.link, t.begin())
	return t.RawFileSystem.Link(c, in, name, out)
}
func (t *timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer t.end(t.symlink, t.begin())
	return t.RawFileSystem.Symlink(c, h, target, name, out)
}
func (t *timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer t.end(t.readlink, t.begin())
	return t.RawFileSystem.Readlink(c, h)
}
func (t *timedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer t.end(t.access, t.begin())
	return t.RawFileSystem.Access(c, in)
}
func (t *timedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer t.end(t.getxattr, t.begin())
	return t.RawFileSystem.GetXAttr(c, h, attr, dest)
}
func (t *timedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer t.end(t.listxattr, t.begin())
	return t.RawFileSystem.ListXAttr(c, h, dest)
}
func (t *timedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer t.end(t.setxattr, t.begin())
	return t.RawFileSystem.SetXAttr(c, in, attr, data)
}
func (t *timedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer t.end(t.removexattr, t.begin())
	return t.RawFileSystem.RemoveXAttr(c, h, attr)
}
func (t *timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer t.end(t.create, t.begin())
	return t.RawFileSystem.Create(c, in, name, out)
}
func (t *timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.end(t.open, t.begin())
	return t.RawFileSystem.Open(c, in, out)
}
func (t *timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer t.end(t.read, t.begin())
	return t.RawFileSystem.Read(c, in, buf)
}
func (t *timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer t.end(t.write, t.begin())
	return t.RawFileSystem.Write(c, in, data)
}
func (t *timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer t.end(t.flush, t.begin())
	return t.RawFileSystem.Flush(c, in)
}
func (t *timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer t.end(t.fsync, t.begin())
	return t.RawFileSystem.Fsync(c, in)
}
func (t *timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer t.end(t.release, t.begin())
	t.RawFileSystem.Release(c, in)
}
func (t *timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer t.end(t.opendir, t.begin())
	return t.RawFileSystem.OpenDir(c, in, out)
}
func (t *timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.end(t.readdir, t.begin())
	return t.RawFileSystem.ReadDir(c, in, out)
}
func (t *timedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer t.end(t.readdirplus, t.begin())
	return t.RawFileSystem.ReadDirPlus(c, in, out)
}
func (t *timedFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer t.end(t.releasedir, t.begin())
	t.RawFileSystem.ReleaseDir(in)
}
func (t *timedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer t.end(t.statfs, t.begin())
	return t.RawFileSystem.StatFs(c, h, out)
}
func (t *timedFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer t.end(t.statx, t.begin())
	return t.RawFileSystem.Statx(c, in, out)
}
