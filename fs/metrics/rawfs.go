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
	return &timedFS{RawFileSystem: fs,
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
	lookup, getattr, setattr, mknod, mkdir, unlink, rmdir, rename, link, symlink, readlink, access,
	getxattr, listxattr, setxattr, removexattr, create, open, read, write, flush, fsync, release,
	opendir, readdir, readdirplus, releasedir, statfs, statx prometheus.Observer
}

func since(o prometheus.Observer, t time.Time) { o.Observe(time.Since(t).Seconds()) }

func (t *timedFS) Lookup(c <-chan struct{}, h *fuse.InHeader, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.lookup, time.Now())
	return t.RawFileSystem.Lookup(c, h, name, out)
}
func (t *timedFS) GetAttr(c <-chan struct{}, in *fuse.GetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer since(t.getattr, time.Now())
	return t.RawFileSystem.GetAttr(c, in, out)
}
func (t *timedFS) SetAttr(c <-chan struct{}, in *fuse.SetAttrIn, out *fuse.AttrOut) fuse.Status {
	defer since(t.setattr, time.Now())
	return t.RawFileSystem.SetAttr(c, in, out)
}
func (t *timedFS) Mknod(c <-chan struct{}, in *fuse.MknodIn, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.mknod, time.Now())
	return t.RawFileSystem.Mknod(c, in, name, out)
}
func (t *timedFS) Mkdir(c <-chan struct{}, in *fuse.MkdirIn, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.mkdir, time.Now())
	return t.RawFileSystem.Mkdir(c, in, name, out)
}
func (t *timedFS) Unlink(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer since(t.unlink, time.Now())
	return t.RawFileSystem.Unlink(c, h, name)
}
func (t *timedFS) Rmdir(c <-chan struct{}, h *fuse.InHeader, name string) fuse.Status {
	defer since(t.rmdir, time.Now())
	return t.RawFileSystem.Rmdir(c, h, name)
}
func (t *timedFS) Rename(c <-chan struct{}, in *fuse.RenameIn, from, to string) fuse.Status {
	defer since(t.rename, time.Now())
	return t.RawFileSystem.Rename(c, in, from, to)
}
func (t *timedFS) Link(c <-chan struct{}, in *fuse.LinkIn, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.link, time.Now())
	return t.RawFileSystem.Link(c, in, name, out)
}
func (t *timedFS) Symlink(c <-chan struct{}, h *fuse.InHeader, target, name string, out *fuse.EntryOut) fuse.Status {
	defer since(t.symlink, time.Now())
	return t.RawFileSystem.Symlink(c, h, target, name, out)
}
func (t *timedFS) Readlink(c <-chan struct{}, h *fuse.InHeader) ([]byte, fuse.Status) {
	defer since(t.readlink, time.Now())
	return t.RawFileSystem.Readlink(c, h)
}
func (t *timedFS) Access(c <-chan struct{}, in *fuse.AccessIn) fuse.Status {
	defer since(t.access, time.Now())
	return t.RawFileSystem.Access(c, in)
}
func (t *timedFS) GetXAttr(c <-chan struct{}, h *fuse.InHeader, attr string, dest []byte) (uint32, fuse.Status) {
	defer since(t.getxattr, time.Now())
	return t.RawFileSystem.GetXAttr(c, h, attr, dest)
}
func (t *timedFS) ListXAttr(c <-chan struct{}, h *fuse.InHeader, dest []byte) (uint32, fuse.Status) {
	defer since(t.listxattr, time.Now())
	return t.RawFileSystem.ListXAttr(c, h, dest)
}
func (t *timedFS) SetXAttr(c <-chan struct{}, in *fuse.SetXAttrIn, attr string, data []byte) fuse.Status {
	defer since(t.setxattr, time.Now())
	return t.RawFileSystem.SetXAttr(c, in, attr, data)
}
func (t *timedFS) RemoveXAttr(c <-chan struct{}, h *fuse.InHeader, attr string) fuse.Status {
	defer since(t.removexattr, time.Now())
	return t.RawFileSystem.RemoveXAttr(c, h, attr)
}
func (t *timedFS) Create(c <-chan struct{}, in *fuse.CreateIn, name string, out *fuse.CreateOut) fuse.Status {
	defer since(t.create, time.Now())
	return t.RawFileSystem.Create(c, in, name, out)
}
func (t *timedFS) Open(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer since(t.open, time.Now())
	return t.RawFileSystem.Open(c, in, out)
}
func (t *timedFS) Read(c <-chan struct{}, in *fuse.ReadIn, buf []byte) (fuse.ReadResult, fuse.Status) {
	defer since(t.read, time.Now())
	return t.RawFileSystem.Read(c, in, buf)
}
func (t *timedFS) Write(c <-chan struct{}, in *fuse.WriteIn, data []byte) (uint32, fuse.Status) {
	defer since(t.write, time.Now())
	return t.RawFileSystem.Write(c, in, data)
}
func (t *timedFS) Flush(c <-chan struct{}, in *fuse.FlushIn) fuse.Status {
	defer since(t.flush, time.Now())
	return t.RawFileSystem.Flush(c, in)
}
func (t *timedFS) Fsync(c <-chan struct{}, in *fuse.FsyncIn) fuse.Status {
	defer since(t.fsync, time.Now())
	return t.RawFileSystem.Fsync(c, in)
}
func (t *timedFS) Release(c <-chan struct{}, in *fuse.ReleaseIn) {
	defer since(t.release, time.Now())
	t.RawFileSystem.Release(c, in)
}
func (t *timedFS) OpenDir(c <-chan struct{}, in *fuse.OpenIn, out *fuse.OpenOut) fuse.Status {
	defer since(t.opendir, time.Now())
	return t.RawFileSystem.OpenDir(c, in, out)
}
func (t *timedFS) ReadDir(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer since(t.readdir, time.Now())
	return t.RawFileSystem.ReadDir(c, in, out)
}
func (t *timedFS) ReadDirPlus(c <-chan struct{}, in *fuse.ReadIn, out *fuse.DirEntryList) fuse.Status {
	defer since(t.readdirplus, time.Now())
	return t.RawFileSystem.ReadDirPlus(c, in, out)
}
func (t *timedFS) ReleaseDir(in *fuse.ReleaseIn) {
	defer since(t.releasedir, time.Now())
	t.RawFileSystem.ReleaseDir(in)
}
func (t *timedFS) StatFs(c <-chan struct{}, h *fuse.InHeader, out *fuse.StatfsOut) fuse.Status {
	defer since(t.statfs, time.Now())
	return t.RawFileSystem.StatFs(c, h, out)
}
func (t *timedFS) Statx(c <-chan struct{}, in *fuse.StatxIn, out *fuse.StatxOut) fuse.Status {
	defer since(t.statx, time.Now())
	return t.RawFileSystem.Statx(c, in, out)
}
