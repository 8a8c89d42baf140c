package localquarantine_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/ckguard/ckguard/localbackend/localquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine/quarantinetest"
)

// localStore is a store folder on this machine's filesystem; nfsLike makes its quarantine act as on a
// filesystem without renameat2 flags (older NFS: plain renames and hard links instead).
type localStore struct {
	dir     string
	nfsLike bool
}

func (s *localStore) Open(t testing.TB) quarantine.Staging {
	l, err := localquarantine.OpenLocal(s.dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.nfsLike {
		l.SetNoRenameFlags()
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func (s *localStore) Write(t testing.TB, key string, data []byte) {
	p := filepath.Join(s.dir, key)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (s *localStore) Read(t testing.TB, key string) ([]byte, bool) {
	b, err := os.ReadFile(filepath.Join(s.dir, key))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return b, true
}

func (s *localStore) Remove(t testing.TB, key string) {
	if err := os.Remove(filepath.Join(s.dir, key)); err != nil {
		t.Fatal(err)
	}
}

func (s *localStore) Crash(t testing.TB, a quarantine.Staging, key string, d quarantine.Decision, step int) bool {
	return a.(*localquarantine.Local).CrashMoveKey(key, d, step)
}

// TestQuarantineSuiteLocal runs the conformance suite on a local folder and on one acting as older NFS.
func TestQuarantineSuiteLocal(t *testing.T) {
	for _, nfsLike := range []bool{false, true} {
		name := map[bool]string{false: "local", true: "nfs-like"}[nfsLike]
		t.Run(name, func(t *testing.T) {
			quarantinetest.Run(t, func(t *testing.T) quarantinetest.Store {
				return &localStore{dir: t.TempDir(), nfsLike: nfsLike}
			})
		})
	}
}
