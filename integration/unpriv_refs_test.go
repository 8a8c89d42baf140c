package integration

import (
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUnprivRefsHidden: user.ckguard.refs names a referencing checkpoint only to a caller who could
// find it by listing from the mount's root. Uid 65534 reads a shared file through a job folder made
// root's 0711 (search, no listing): the answer names none of the job's checkpoints, only counts them,
// while root on the same mount gets every name. Once the job folder is 0755 again, 65534 gets the names.
func TestUnprivRefsHidden(t *testing.T) {
	mntRequire(t)
	base, tr := unprivStore(t, "ckguard-refs-")
	nobodyOwns(t, tr.Root)
	p := sharedMount(t, base, tr.Root)

	// A referenced file whose referencing checkpoints all lie in its own job folder.
	var ref, job string
	var names []string
	buf := make([]byte, 64<<10)
	for _, r := range tr.Referenced() {
		n, err := syscall.Getxattr(p.m(r), "user.ckguard.refs", buf)
		if err != nil {
			continue
		}
		j := path.Dir(path.Dir(r))
		all := strings.Split(string(buf[:n]), "\n")
		same := len(all) > 0
		for _, m := range all {
			same = same && strings.HasPrefix(m, j+"/chk-") && strings.HasSuffix(m, "/_metadata")
		}
		if same && path.Base(path.Dir(r)) == "shared" {
			ref, job, names = r, j, all
			break
		}
	}
	if ref == "" {
		t.Fatal("no shared file referenced only from its own job folder")
	}
	refsAsNobody := func() string {
		t.Helper()
		out, code := asNobody(t, "/usr/bin/python3", "-c",
			`import os, sys; sys.stdout.write(os.getxattr(sys.argv[1], "user.ckguard.refs").decode())`, p.m(ref))
		if code != 0 {
			t.Fatalf("getxattr as %s: exit %d\n%s", nobodyUID, code, out)
		}
		return out
	}

	jobDir := filepath.Join(tr.Root, filepath.FromSlash(job))
	if err := os.Chown(jobDir, 0, 0); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(jobDir, 0o711); err != nil {
		t.Fatal(err)
	}
	got := refsAsNobody()
	for _, m := range names {
		if strings.Contains(got, path.Dir(m)) {
			t.Errorf("uid %s cannot list %s, yet refs name %s:\n%s", nobodyUID, job, m, got)
		}
	}
	wantCount := strconv.Itoa(len(names)) + " more checkpoint"
	if !strings.HasPrefix(got, wantCount) {
		t.Errorf("refs as uid %s = %q, want the %d hidden checkpoints counted (%q…)", nobodyUID, got, len(names), wantCount)
	}
	// Root on the same mount still gets every name.
	n, err := syscall.Getxattr(p.m(ref), "user.ckguard.refs", buf)
	if err != nil || string(buf[:n]) != strings.Join(names, "\n") {
		t.Errorf("refs as root with the job folder 0711: %q %v, want %q", buf[:n], err, strings.Join(names, "\n"))
	}

	if err := os.Chmod(jobDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if got := refsAsNobody(); got != strings.Join(names, "\n") {
		t.Errorf("refs as uid %s with the job folder 0755: %q, want %q", nobodyUID, got, strings.Join(names, "\n"))
	}
}
