package hdfsquarantine_test

import (
	"context"
	"io/fs"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// ownerView reports owner for the quarantine folder itself (the user who made it), and lets the
// client go by another name than the owners the NameNode reports (auth_to_local).
type ownerView struct {
	*hdfsfake.FS
	user  string // User(); "" is the fake's
	owner string // owner of the folder; "" is the fake's
}

func (o ownerView) User() string {
	if o.user != "" {
		return o.user
	}
	return o.FS.User()
}

func (o ownerView) Stat(ctx context.Context, name string) (hdfsclient.FileInfo, error) {
	fi, err := o.FS.Stat(ctx, name)
	if err == nil && o.owner != "" && name == root+"/"+store.QuarantineDir {
		fi.Owner = o.owner
	}
	return fi, err
}

// A quarantine folder someone else made before the first mount (the Flink user can write the store
// root) is not the daemon's: staging into it would hand deleted files to that user and let them plant
// entries a restore puts back. Open refuses it; a folder of the daemon's (also under an owner name the
// NameNode maps its principal to) is used.
func TestOpenRefusesAFolderSomeoneElseOwns(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		mode   uint32 // mode of a folder made before Open (0: none)
		user   string
		owner  string
		refuse string
	}{
		{name: "made by Open"},
		{name: "the daemon's, made earlier", mode: 0o700},
		{name: "world-writable", mode: 0o777, refuse: "writable by others"},
		{name: "group-writable", mode: 0o770, refuse: "writable by others"},
		{name: "owned by the Flink user", mode: 0o700, owner: "flinkjob", refuse: "owned by flinkjob"},
		{name: "principal mapped to another owner name", mode: 0o700, user: "ckguard-svc"},
		{name: "owned by another user, principal mapped", mode: 0o700, user: "ckguard-svc", owner: "flinkjob", refuse: "owned by flinkjob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStore(t, map[string]string{"job/a": "a"})
			if tc.mode != 0 {
				// the fake applies no umask: Mkdir's mode is the folder's
				if err := f.Mkdir(ctx, root+"/"+store.QuarantineDir, fsMode(tc.mode)); err != nil {
					t.Fatal(err)
				}
			}
			a, err := hdfsquarantine.Open(ctx, ownerView{FS: f, user: tc.user, owner: tc.owner}, root, nil)
			if tc.refuse != "" {
				if err == nil || !strings.Contains(err.Error(), tc.refuse) {
					t.Fatalf("Open = %v, want a refusal naming %q", err, tc.refuse)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if left := filesBelow(f, a.Dir()); len(left) != 0 {
				t.Errorf("Open left %v in the folder", left)
			}
			if _, err := a.Stage(ctx, "job/a", quarantine.Decision{Op: "unlink", Reason: "allowed"}); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func fsMode(m uint32) fs.FileMode { return fs.FileMode(m) }

// The area is named by a path a user who can write the store root (the Flink jobs' user) can take
// over while a mount runs: rename the daemon's folder away and make one of their own in its place.
// Stagings, listings, restores and purges stay in the folder Open checked (its inode), so the deleted
// file never reaches that user's folder and what they plant there is never listed or restored.
func TestStagingNeverFollowsAReplacedFolder(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"job/a": "a", "job/b": "b"})
	a := open(t, f, nil)
	d := quarantine.Decision{Op: "unlink", Reason: "allowed"}
	if _, err := a.Stage(ctx, "job/b", d); err != nil {
		t.Fatal(err)
	}
	moved := root + "/moved-away"
	if err := f.Rename(ctx, a.Dir(), moved); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir(ctx, a.Dir(), 0o777); err != nil {
		t.Fatal(err)
	}
	planted := "0000000000000000001-0123456789abcdef~unlink~0~0~0~~" + b64("job/planted")
	if err := f.Put(a.Dir()+"/"+planted, []byte("evil"), mtime); err != nil {
		t.Fatal(err)
	}
	e, err := a.Stage(ctx, "job/a", d)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(ctx, a.EntryPath(e.ID)); err == nil {
		t.Fatalf("the deleted file was staged into the folder another user made in the area's place: %s", a.EntryPath(e.ID))
	}
	if b, err := f.ReadFile(moved + strings.TrimPrefix(a.EntryPath(e.ID), a.Dir())); err != nil || string(b) != "a" {
		t.Fatalf("the staged file is not in the area's own folder: %q %v", b, err)
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 2 || len(probs) != 0 {
		t.Fatalf("ListAll = %+v %+v %v, want the two entries staged", es, probs, err)
	}
	for _, e := range es {
		if e.Key() == "job/planted" {
			t.Errorf("the planted entry is listed: %+v", e)
		}
	}
	if _, err := a.Restore(ctx, planted); err == nil {
		t.Error("restored the planted entry")
	}
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if b, _ := f.ReadFile(root + "/job/a"); string(b) != "a" {
		t.Errorf("restored job/a holds %q", b)
	}
	if _, err := f.Stat(ctx, root+"/job/planted"); err == nil {
		t.Error("the planted file reached the store")
	}
}

// noInodePaths answers no reserved inode path, as a router of a federated namespace does not.
type noInodePaths struct{ *hdfsfake.FS }

func reserved(op string, names ...string) error {
	for _, n := range names {
		if strings.HasPrefix(n, "/.reserved/") {
			return &hdfsclient.Error{Op: op, Path: n, Class: fs.ErrNotExist, Err: fs.ErrNotExist}
		}
	}
	return nil
}

func (n noInodePaths) Stat(ctx context.Context, name string) (hdfsclient.FileInfo, error) {
	if err := reserved("stat", name); err != nil {
		return hdfsclient.FileInfo{}, err
	}
	return n.FS.Stat(ctx, name)
}

func (n noInodePaths) List(ctx context.Context, name string, fn func([]hdfsclient.FileInfo) error) error {
	if err := reserved("list", name); err != nil {
		return err
	}
	return n.FS.List(ctx, name, fn)
}

func (n noInodePaths) Rename(ctx context.Context, from, to string) error {
	if err := reserved("rename", from, to); err != nil {
		return err
	}
	return n.FS.Rename(ctx, from, to)
}

func (n noInodePaths) Remove(ctx context.Context, name string) error {
	if err := reserved("delete", name); err != nil {
		return err
	}
	return n.FS.Remove(ctx, name)
}

// Where the NameNode answers no inode paths the area names its folder by its path and still stages,
// lists and restores.
func TestAreaWithoutInodePaths(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"job/a": "a"})
	a, err := hdfsquarantine.Open(ctx, noInodePaths{f}, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !a.ByPath() {
		t.Error("ByPath = false on a NameNode without inode paths (the mount's WARN would not be logged)")
	}
	if open(t, f, nil).ByPath() {
		t.Error("ByPath = true where inode paths resolve")
	}
	e, err := a.Stage(ctx, "job/a", quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if b, err := f.ReadFile(a.EntryPath(e.ID)); err != nil || string(b) != "a" {
		t.Fatalf("staged file %q %v", b, err)
	}
	if es, err := a.List(ctx); err != nil || len(es) != 1 {
		t.Fatalf("List = %+v %v", es, err)
	}
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	exactlyOnce(t, f, a, "job/a", "a")
}
