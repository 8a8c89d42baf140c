package localfs

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCallerUmaskOnly: files, folders and FIFOs an unprivileged user creates through the mount with umask
// 002 keep group write although the daemon was started under umask 022 (systemd's default): the kernel has
// applied the caller's umask already, and the daemon's is not applied on top.
func TestCallerUmaskOnly(t *testing.T) {
	old := unix.Umask(0o022)
	t.Cleanup(func() { unix.Umask(old) })
	store := t.TempDir()
	e := mountShared(t, store)
	if err := os.Mkdir(filepath.Join(store, "job"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(filepath.Join(store, "job"), 65534, 65534); err != nil {
		t.Fatal(err)
	}
	m := func(k string) string { return filepath.Join(e.mnt, k) }
	out, err := asNobody(t, "sh", "-c", `umask 002 && touch "$1" && mkdir "$2" && mkfifo "$3" && : > "$4"`, "sh",
		m("job/touched"), m("job/dir"), m("job/fifo"), m("job/redirected"))
	if err != nil {
		t.Fatalf("creating as uid %s with umask 002: %v %s", nobody, err, out)
	}
	for k, want := range map[string]os.FileMode{"job/touched": 0o664, "job/dir": 0o775, "job/fifo": 0o664, "job/redirected": 0o664} {
		st, err := os.Lstat(filepath.Join(store, k))
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s created with umask 002 through a daemon under umask 022: mode %o, want %o", k, got, want)
		}
	}
}
