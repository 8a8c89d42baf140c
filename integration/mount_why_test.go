package integration

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// `ckguard why` asked about a file by its path in the mount (absolute, or relative to a shell standing in
// the mount) answers for the store object the mount shows there, exactly as for the store key.
func TestMountWhyByMountPath(t *testing.T) {
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, tr.Root, filepath.Join(dir, "index"))
	refs := tr.Referenced()
	if len(refs) == 0 {
		t.Fatal("scenario has no referenced files")
	}
	key := refs[0]
	bin := mntBinary(t)
	base := []string{"why", "--store", p.store, "--index", p.index}
	for _, c := range []struct{ name, cwd, arg string }{
		{"store key", "", key},
		{"absolute mount path", "", p.m(key)},
		{"relative to the mount", p.mnt, key},
		{"relative inside a folder of the mount", filepath.Dir(p.m(key)), filepath.Base(key)},
	} {
		out, code := mntRun(t, c.cwd, bin, append(base, c.arg)...)
		if code != 1 || !strings.Contains(out, "REFUSED") || strings.Contains(out, "no such object") {
			t.Errorf("%s: ckguard why %s (in %q): exit %d\n%s", c.name, c.arg, c.cwd, code, out)
		}
	}
}
