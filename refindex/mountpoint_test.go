package refindex

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// TestWithMountpoint: a checkpoint Flink wrote through the mount references
// file:<mountpoint>/…; the mount daemons pass WithMountpoint so those references protect store
// keys. Without it the store proves the mapping (the files lie at the same relative place) and
// they still protect; a user --map of the same prefix wins over both.
func TestWithMountpoint(t *testing.T) {
	ctx := context.Background()
	base := t.TempDir()
	mnt := filepath.Join(base, "mnt")
	tr, err := treegen.YoungOrphan(filepath.Join(base, "store"), time.Now(), treegen.Options{URIPrefix: "file:" + mnt})
	if err != nil {
		t.Fatal(err)
	}
	var ref string
	for _, c := range tr.Live {
		for _, r := range c.Refs {
			if filepath.Base(filepath.Dir(r)) == "shared" {
				ref = r
			}
		}
	}
	if ref == "" {
		t.Fatal("scenario has no shared reference")
	}
	st, err := localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		opts    []Option
		protect bool
	}{
		{"no mountpoint (inferred)", nil, true},
		{"mountpoint", []Option{WithMountpoint(mnt)}, true},
		{"mountpoint and the same --map", []Option{WithPathMap([]pathnorm.Mapping{{From: "file://" + mnt + "/"}}, ""), WithMountpoint(mnt)}, true},
		{"user maps the mountpoint elsewhere", []Option{WithPathMap([]pathnorm.Mapping{{From: "file:" + mnt, To: "other"}}, ""), WithMountpoint(mnt)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ix, err := Open(filepath.Join(t.TempDir(), "index"), st, DefaultPolicy(), tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			if err := ix.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			d := ix.Decide(ctx, ref, verdict.OpUnlink)
			if got := !d.Allow && d.Reason == verdict.ReasonReferenced; got != tc.protect {
				t.Errorf("unlink %s: %+v, want referenced=%v", ref, d, tc.protect)
			}
		})
	}
}

// TestCLIIndexReusedByMount: an index built by the CLI (no mountpoint) is used by a mount as it is: no
// rebuild at its start (that took minutes to hours on big stores, past a service manager's start timeout),
// and it decides at once. Only when the index holds references through the mountpoint it was built
// without (outside references then, store keys with the mount's map) does the mount's first sync rebuild it;
// until then every deletion is refused.
func TestCLIIndexReusedByMount(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		prefix  func(mnt string) string // URI prefix of the store's references
		rebuild bool
	}{
		{"references by store path", func(string) string { return "" }, false},
		// The CLI's index already placed them: the store proves the mapping (the files lie at the same
		// relative place), so none of its references is outside and the mount needs no rebuild.
		{"references through the mountpoint (inferred)", func(mnt string) string { return "file:" + mnt }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			mnt := filepath.Join(base, "mnt")
			tr, err := treegen.YoungOrphan(filepath.Join(base, "store"), time.Now(), treegen.Options{URIPrefix: tc.prefix(mnt)})
			if err != nil {
				t.Fatal(err)
			}
			st, err := localstore.New(tr.Root)
			if err != nil {
				t.Fatal(err)
			}
			dir := filepath.Join(base, "index")
			cli, err := Open(dir, st, DefaultPolicy())
			if err != nil {
				t.Fatal(err)
			}
			if err := cli.Rebuild(ctx); err != nil {
				t.Fatal(err)
			}
			gen := cli.mu.cur.n
			cli.Close()
			mount, err := Open(dir, st, DefaultPolicy(), WithMountpoint(mnt))
			if err != nil {
				t.Fatal(err)
			}
			defer mount.Close()
			garbage := tr.Orphans(treegen.DefaultPolicy, 0)
			if len(garbage) == 0 {
				t.Fatal("scenario has no garbage")
			}
			d := mount.Decide(ctx, garbage[0], verdict.OpUnlink)
			if d.Allow == tc.rebuild {
				t.Errorf("before the mount's first sync: unlink %s = %+v, want allowed=%v", garbage[0], d, !tc.rebuild)
			}
			if err := mount.Sync(ctx); err != nil {
				t.Fatal(err)
			}
			if rebuilt := mount.mu.cur.n != gen; rebuilt != tc.rebuild {
				t.Errorf("mount's first sync: rebuilt=%v (generation %d → %d), want %v", rebuilt, gen, mount.mu.cur.n, tc.rebuild)
			}
			for _, k := range tr.Referenced() {
				if d := mount.Decide(ctx, k, verdict.OpUnlink); d.Allow {
					t.Errorf("%s is referenced but may be deleted through the mount", k)
				}
			}
			mount.Close()
			// And back: the CLI opens the mount's index without a rebuild either.
			again, err := Open(dir, st, DefaultPolicy())
			if err != nil {
				t.Fatal(err)
			}
			defer again.Close()
			if again.mu.needRebuild {
				t.Errorf("the CLI reopening the mount's index wants a rebuild")
			}
		})
	}
}
