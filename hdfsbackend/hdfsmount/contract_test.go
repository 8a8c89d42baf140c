package hdfsmount_test

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/mounttest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store"
)

// fakeStore is the in-process namespace under the mount, reached beside it.
type fakeStore struct{ f *hdfsfake.FS }

func (s fakeStore) Put(t testing.TB, key, data string) {
	t.Helper()
	if err := s.f.Put(dir+"/"+key, []byte(data), time.Now()); err != nil {
		t.Fatal(err)
	}
}

func (s fakeStore) Get(t testing.TB, key string) (string, bool) {
	b, err := s.f.ReadFile(dir + "/" + key)
	if err != nil {
		return "", false
	}
	return string(b), true
}

func (s fakeStore) Files(t testing.TB) []string {
	var out []string
	for _, f := range s.f.Files() {
		if k, ok := strings.CutPrefix(f, dir+"/"); ok && !store.InQuarantine(k) {
			out = append(out, k)
		}
	}
	return out
}

func hdfsHarness() mounttest.Harness { return harnessWith(false) }

// harnessWith is the contract harness, with a quarantine area the mount stages in when quarantined.
func harnessWith(quarantined bool) mounttest.Harness {
	return mounttest.Harness{
		Mount: func(t *testing.T, enf *guard.Enforcer) (string, mounttest.Store) {
			f := hdfsfake.New("flink")
			if err := f.MkdirAll(context.Background(), dir, 0o755); err != nil {
				t.Fatal(err)
			}
			mnt := t.TempDir()
			o := hdfsmount.Options{FS: f, Dir: dir, Name: "hdfs://nn:8020" + dir, Mountpoint: mnt, Enforcer: enf}
			if quarantined {
				a, err := hdfsquarantine.Open(context.Background(), f, dir, nil)
				if err != nil {
					t.Fatal(err)
				}
				o.Quarantine = a
			}
			m, err := hdfsmount.Mount(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := m.Unmount(); err != nil {
					_ = exec.Command("fusermount3", "-uz", mnt).Run()
				}
			})
			return mnt, fakeStore{f}
		},
		Times:              true,
		DirRename:          true,
		NotifiesEveryWrite: true,
	}
}

// TestContract runs the mount contract suite on the HDFS mount (over the in-process namespace).
func TestContract(t *testing.T) { mounttest.Run(t, hdfsHarness()) }

// TestContractQuarantined runs it on a mount that stages its deletions in a quarantine area.
func TestContractQuarantined(t *testing.T) { mounttest.Run(t, harnessWith(true)) }

// TestContractCatchesBrokenEnforcer: with an enforcer that lets every unlink through, the suite fails
// on the HDFS mount.
func TestContractCatchesBrokenEnforcer(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil || testing.Short() {
		t.Skip("FUSE mount not run (-short or no /dev/fuse): the broken run would skip and pass")
	}
	mounttest.CatchesBroken(t, "^TestContract$/^(RefusedWhenReferenced|CleanupToolsLeaveReferenced)$", "unlink",
		"TestContract/RefusedWhenReferenced/unlink", "TestContract/CleanupToolsLeaveReferenced/rm_-rf")
}
