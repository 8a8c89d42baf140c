package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestUnprivQuarantineEdgeNames: uid 65534 deletes, through an --allow-other local mount with the
// quarantine on, files whose names hold the entry-name separator, percent signs, control characters,
// invalid UTF-8, 255 bytes (a path too long for a self-describing entry name), or that parse as an
// entry name themselves. Root then finds each
// in `ckguard quarantine list` under its exact path, with no problems, and restores it by that path,
// byte-identical.
func TestUnprivQuarantineEdgeNames(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-qnames-")
	nobodyOwns(t, tr.Root)
	p := sharedMount(t, base, tr.Root)
	names := []string{"a~b~c~d~e~f~g", "100%25%%", "ctl\x01\x1b[31m\n\t", "bad\xff\xfe", strings.Repeat("n", 255),
		"0000000000000000001-0123456789abcdef~unlink~0~0~0~~Li4vLi4vZXRjL3g"}
	script := `import os, sys, time
d = sys.argv[1]
os.mkdir(d)
for n in sys.argv[2:]:
    p = os.path.join(os.fsencode(d), os.fsencode(n))
    with open(p, "wb") as f:
        f.write(b"content " + os.fsencode(n))
    old = time.time() - 30 * 86400  # out of the grace period (its creator may backdate a new file)
    os.utime(p, (old, old))
    os.unlink(p)
print("done")
`
	out, code := asNobody(t, "/usr/bin/python3", append([]string{"-c", script, p.m("edge")}, names...)...)
	if code != 0 || !strings.Contains(out, "done") {
		t.Fatalf("create and unlink as uid %s: exit %d\n%s", nobodyUID, code, out)
	}
	r := qListResult(t, p)
	if len(r.Problems) != 0 {
		t.Fatalf("quarantine list problems: %+v", r.Problems)
	}
	staged := map[string]bool{}
	for _, e := range r.Entries {
		staged[e.Key()] = true
	}
	for _, n := range names {
		k := "edge/" + n
		if !staged[k] {
			t.Errorf("%q not staged under its exact path (entries: %d)", k, len(r.Entries))
			continue
		}
		if out, code := qcli(p, "restore", k); code != 0 {
			t.Errorf("restore %q: exit %d\n%s", k, code, out)
			continue
		}
		if b, err := os.ReadFile(filepath.Join(tr.Root, "edge", n)); err != nil || string(b) != "content "+n {
			t.Errorf("%q restored as %q, %v", k, b, err)
		}
	}
}
