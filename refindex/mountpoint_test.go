package refindex

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store/localstore"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestWithMountpoint (review C3): a checkpoint Flink wrote through the mount references file:<mountpoint>/…;
// the mount daemons pass WithMountpoint so those references protect store keys. Without it they are outside
// the store and protect nothing; a user --map of the same prefix wins over the automatic one.
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
		{"no mountpoint", nil, false},
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
			d := ix.Decide(ctx, ref, OpUnlink)
			if got := !d.Allow && d.Reason == ReasonReferenced; got != tc.protect {
				t.Errorf("unlink %s: %+v, want referenced=%v", ref, d, tc.protect)
			}
		})
	}
}
