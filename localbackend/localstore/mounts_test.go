package localstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/hangfs"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
)

func TestParseMountsBelow(t *testing.T) {
	table := `22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
30 22 0:25 / /srv/store rw shared:2 - nfs4 nas:/x rw
31 30 0:26 / /srv/store/scratch/a\040b rw shared:3 master:1 - fuse.sshfs u@h:/ rw,user_id=1234,group_id=1234
32 30 0:27 / /srv/store/job/x\134y rw - tmpfs tmpfs rw
33 22 0:28 / /srv/storeother rw - tmpfs tmpfs rw
34 31 0:29 / /srv/store/scratch/a\040b/deeper rw - tmpfs tmpfs rw
35 30 0:30 / /srv/store/job/rootfuse rw - fuse hangfs rw,user_id=0,group_id=0
`
	for _, tc := range []struct {
		root string
		want map[string]int64 // key: who mounted it as user_id says, -1 when root or not FUSE
	}{
		{"/srv/store", map[string]int64{"scratch/a b": 1234, `job/x\y`: -1, "scratch/a b/deeper": -1, "job/rootfuse": -1}},
		{"/srv/store/scratch", map[string]int64{"a b": 1234, "a b/deeper": -1}},
		{"/srv/store/scratch/a b", map[string]int64{"deeper": -1}},
		{"/srv/storeother", map[string]int64{}},
		{"/", map[string]int64{"srv/store": -1, "srv/store/scratch/a b": 1234, `srv/store/job/x\y`: -1, "srv/storeother": -1, "srv/store/scratch/a b/deeper": -1, "srv/store/job/rootfuse": -1}},
	} {
		if got := localstore.ParseMountsBelow([]byte(table), tc.root); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("below %s: %v, want %v", tc.root, got, tc.want)
		}
	}
}

// hungStore makes a local store whose folder scratch (owned by nobody) holds the mount point
// scratch/mnt of a file system that never answers, beside job/shared/old and scratch/ok.
func hungStore(t *testing.T) (dir string, release func()) {
	dir = t.TempDir()
	for _, p := range []string{"job/shared/old", "scratch/ok"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mp := filepath.Join(dir, "scratch", "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(filepath.Join(dir, "scratch"), 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	return dir, hangfs.Mount(t, mp).Release
}

// within runs f and fails t when it has not returned after d (then the hung file system is
// released first, so that f can finish).
func within(t *testing.T, release func(), d time.Duration, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(d):
		release()
		t.Fatalf("%s did not return within %s: it is blocked in the file system mounted inside the store", what, d)
	}
}

// TestWalkSkipsAMountInsideTheStore: a file system any user mounted inside the store whose getattr and
// readdir never answer (issue 29) is reported as an unknown subtree, owned by its parent folder's
// owner, without being touched; the walk reports everything else and returns; Stat and Open of keys
// at or below it fail at once naming the mount. Also through a symlink to the store root, and when
// the mount was made after the walk read the mount table (RESOLVE_NO_XDEV alone).
func TestWalkSkipsAMountInsideTheStore(t *testing.T) {
	dir, release := hungStore(t)
	link := filepath.Join(t.TempDir(), "via-link")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, root string
		table      bool
	}{
		{"the root", dir, true},
		{"the root through a symlink", link, true},
		{"mounted after the table was read", dir, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.table {
				defer localstore.SetMountInfoPath(empty)()
			}
			s, err := localstore.New(tc.root)
			if err != nil {
				t.Fatal(err)
			}
			for _, prefix := range []string{"", "scratch"} {
				var seen []string
				var unknown []store.UnknownSubtree
				ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error {
					unknown = append(unknown, u)
					return nil
				})
				var werr error
				within(t, release, 10*time.Second, "Walk("+prefix+")", func() {
					werr = s.Walk(ctx, prefix, func(oi store.ObjectInfo) error {
						seen = append(seen, oi.Path)
						return nil
					})
				})
				if werr != nil {
					t.Fatalf("Walk(%q): %v", prefix, werr)
				}
				if len(unknown) != 1 || unknown[0].Key != "scratch/mnt" {
					t.Fatalf("Walk(%q) unknown subtrees %+v, want scratch/mnt", prefix, unknown)
				}
				u := unknown[0]
				if !errors.Is(u.Err, localstore.ErrMounted) || !strings.Contains(u.Error(), filepath.Join(dir, "scratch", "mnt")) {
					t.Errorf("cause %v, want ErrMounted naming %s", u.Err, filepath.Join(dir, "scratch", "mnt"))
				}
				if os.Geteuid() == 0 && (!u.HasUID || u.UID != 65534) {
					t.Errorf("owner %d (known %v), want 65534: the owner of the mount point's folder", u.UID, u.HasUID)
				}
				want := "scratch/ok"
				found := false
				for _, p := range seen {
					found = found || p == want
					if strings.HasPrefix(p, "scratch/mnt") {
						t.Errorf("the walk reported %s, at or below the mount point", p)
					}
				}
				if !found {
					t.Errorf("Walk(%q) saw %v, want %s among them", prefix, seen, want)
				}
			}
			var lerr error
			var metaUnknown int
			ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error { metaUnknown++; return nil })
			within(t, release, 10*time.Second, "ListMetadata", func() {
				lerr = s.ListMetadata(ctx, func(store.ObjectInfo) error { return nil })
			})
			if lerr != nil || metaUnknown != 1 {
				t.Errorf("ListMetadata: %v, %d unknown subtrees, want nil and 1", lerr, metaUnknown)
			}
			// Without WithUnknown the walk fails naming the mount, instead of hanging.
			within(t, release, 10*time.Second, "Walk without unknown subtrees", func() {
				lerr = s.Walk(context.Background(), "", func(store.ObjectInfo) error { return nil })
			})
			if !errors.Is(lerr, localstore.ErrMounted) {
				t.Errorf("Walk without WithUnknown: %v, want ErrMounted", lerr)
			}
			for _, key := range []string{"scratch/mnt", "scratch/mnt/chk-1/_metadata"} {
				var serr, oerr error
				within(t, release, 10*time.Second, "Stat/Open "+key, func() {
					_, serr = s.Stat(context.Background(), key)
					var r store.Reader
					if r, oerr = s.Open(context.Background(), key); r != nil {
						r.Close()
					}
				})
				if !errors.Is(serr, localstore.ErrMounted) || !errors.Is(oerr, localstore.ErrMounted) {
					t.Errorf("Stat(%s): %v; Open: %v; want both ErrMounted", key, serr, oerr)
				}
			}
			// A walk of the mount point itself, or below it, reports it unknown too.
			for _, prefix := range []string{"scratch/mnt", "scratch/mnt/chk-1"} {
				var got []string
				ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error {
					got = append(got, u.Key)
					return nil
				})
				within(t, release, 10*time.Second, "Walk("+prefix+")", func() {
					lerr = s.Walk(ctx, prefix, func(store.ObjectInfo) error { return nil })
				})
				if lerr != nil || len(got) != 1 || got[0] != prefix {
					t.Errorf("Walk(%s): %v, unknown %v, want [%s]", prefix, lerr, got, prefix)
				}
			}
		})
	}
}

// TestWalkSkipsAMountDeepInTheStore: below localstore.MaxOpenDirs levels folders are read whole, with
// the lstat of each entry; a mount point there is not stated either.
func TestWalkSkipsAMountDeepInTheStore(t *testing.T) {
	dir := t.TempDir()
	deep := mkdirDeep(t, dir, localstore.MaxOpenDirs+6, 4, "")
	for _, sub := range []string{"mnt", "ok"} {
		if err := os.Mkdir(filepath.Join(dir, deep, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	release := hangfs.Mount(t, filepath.Join(dir, deep, "mnt")).Release
	s, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(t.TempDir(), "mountinfo")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, table := range []bool{true, false} {
		t.Run(map[bool]string{true: "from the mount table", false: "mounted after the table was read"}[table], func(t *testing.T) {
			if !table {
				defer localstore.SetMountInfoPath(empty)()
			}
			deepWalk(t, s, deep, release)
		})
	}
}

func deepWalk(t *testing.T, s *localstore.Store, deep string, release func()) {
	var err error
	var unknown []string
	sawOK := false
	ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error {
		if errors.Is(u.Err, localstore.ErrMounted) {
			unknown = append(unknown, u.Key)
		}
		return nil
	})
	within(t, release, 10*time.Second, "the deep walk", func() {
		err = s.Walk(ctx, "", func(oi store.ObjectInfo) error {
			sawOK = sawOK || oi.Path == deep+"/ok"
			return nil
		})
	})
	if err != nil || len(unknown) != 1 || unknown[0] != deep+"/mnt" || !sawOK {
		t.Errorf("deep walk: %v, mounts reported %v, saw %s/ok %v; want nil, [%s/mnt], true", err, unknown, deep, sawOK, deep)
	}
}

// TestMountTableReadAgainWhenItChanges: one store, walked before a mount, after it and after the
// unmount: each walk and each Stat works from the mount table as it is then (the exact mount point
// named), never from an older one.
func TestMountTableReadAgainWhenItChanges(t *testing.T) {
	dir := t.TempDir()
	mp := filepath.Join(dir, "scratch", "mnt")
	if err := os.MkdirAll(mp, 0o755); err != nil {
		t.Fatal(err)
	}
	s, err := localstore.New(dir)
	if err != nil {
		t.Fatal(err)
	}
	walk := func() []string {
		var got []string
		ctx := store.WithUnknown(context.Background(), func(u store.UnknownSubtree) error {
			got = append(got, u.Key)
			return nil
		})
		if err := s.Walk(ctx, "", func(store.ObjectInfo) error { return nil }); err != nil {
			t.Fatal(err)
		}
		return got
	}
	if got := walk(); len(got) != 0 {
		t.Fatalf("before the mount: unknown %v", got)
	}
	hung := hangfs.Mount(t, mp)
	var got []string
	within(t, hung.Release, 10*time.Second, "the walk after the mount", func() { got = walk() })
	if len(got) != 1 || got[0] != "scratch/mnt" {
		t.Fatalf("after the mount: unknown %v, want [scratch/mnt]", got)
	}
	var serr error
	within(t, hung.Release, 10*time.Second, "Stat below the mount", func() { _, serr = s.Stat(context.Background(), "scratch/mnt/x") })
	if serr == nil || !strings.Contains(serr.Error(), "mounted at "+mp+";") {
		t.Errorf("Stat below the mount: %v, want the mount point %s named from the table", serr, mp)
	}
	hung.Unmount(t)
	if got := walk(); len(got) != 0 {
		t.Errorf("after the unmount: unknown %v", got)
	}
}
