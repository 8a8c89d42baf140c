package hdfsmount

import (
	"context"
	"io/fs"
	"testing"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
)

// TestRefsVisibleByMountModes: on HDFS a referencing checkpoint is named to a caller only if the mount's
// own attributes (the mount's uid:gid, the NameNode's permission bits) let them list every folder of
// its path: a 0711 job folder hides its checkpoints from others, not from the mount's owner.
func TestRefsVisibleByMountModes(t *testing.T) {
	ctx := context.Background()
	const dir = "/ck"
	f := hdfsfake.New("flink")
	for _, d := range []struct {
		name string
		perm uint32
	}{{dir, 0o755}, {dir + "/open", 0o755}, {dir + "/open/chk-1", 0o755}, {dir + "/closed", 0o711}, {dir + "/closed/chk-2", 0o755}} {
		if err := f.Mkdir(ctx, d.name, fsMode(d.perm)); err != nil && d.name != dir {
			t.Fatal(err)
		}
	}
	fsys := &filesystem{fs: f, dir: dir, uid: 1000, gid: 1000, attrs: newAttrCache(maxCached)}
	fsys.relist = newRelister(fsys)
	other := guard.Caller{UID: 65534, GID: 65534, Known: true}
	owner := guard.Caller{UID: 1000, GID: 1000, Known: true}
	for _, c := range []struct {
		c    guard.Caller
		ref  string
		want bool
	}{
		{other, "open/chk-1/_metadata", true},
		{other, "closed/chk-2/_metadata", false},
		{owner, "closed/chk-2/_metadata", true},
		{other, "missing/chk-3/_metadata", false},
		{guard.Caller{}, "open/chk-1/_metadata", false},
	} {
		if got := fsys.refsVisible(ctx, c.c)(c.ref); got != c.want {
			t.Errorf("uid %d, %s: visible %v, want %v", c.c.UID, c.ref, got, c.want)
		}
	}
}

func fsMode(p uint32) fs.FileMode { return fs.FileMode(p) }
