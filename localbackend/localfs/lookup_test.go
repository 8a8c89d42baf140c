package localfs

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// swappedScript holds argv[1] (a folder through the mount) open, says "ready", waits for a line, then
// stats, reads the symlink and lists through the held folder (each answered by the daemon for the inode it
// knows) and prints one line per attempt: "name ok <what>" or "name errno N".
const swappedScript = `
import os, sys
d = os.open(sys.argv[1], os.O_PATH | os.O_DIRECTORY)
print("ready", flush=True)
sys.stdin.readline()
def attempt(name, f):
    try:
        print(name, "ok", f(), flush=True)
    except OSError as e:
        print(name, "errno", e.errno, flush=True)
attempt("stat", lambda: os.stat("secret.txt", dir_fd=d, follow_symlinks=False).st_size)
attempt("readlink", lambda: os.readlink("link", dir_fd=d))
attempt("list", lambda: sorted(os.listdir(os.open(".", os.O_RDONLY | os.O_DIRECTORY, dir_fd=d))))
print("done", flush=True)
`

// TestLookupsStayBeneathTheStore: a store folder an unprivileged user has open through the mount is
// swapped (in the store) for a symlink to a root-only directory outside it. Through the folder's inode the
// user gets nothing of that directory: no stat of its files, no symlink target, no listing (before, lookups
// and readlink went by path as root and answered for what the symlink pointed at).
func TestLookupsStayBeneathTheStore(t *testing.T) {
	store := t.TempDir()
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.Mkdir(secret, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(secret, "secret.txt"), []byte("root's"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/root/only/target", filepath.Join(secret, "link")); err != nil {
		t.Fatal(err)
	}
	e := mountShared(t, store)
	if err := os.MkdirAll(filepath.Join(store, "job/d"), 0o755); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command("setpriv", "--reuid="+nobody, "--regid="+nobody, "--clear-groups", "--",
		"/usr/bin/python3", "-c", swappedScript, filepath.Join(e.mnt, "job/d"))
	cmd.Dir = "/"
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := bufio.NewScanner(stdout)
	if !lines.Scan() || lines.Text() != "ready" {
		t.Fatalf("helper: %q", lines.Text())
	}
	if err := os.Remove(filepath.Join(store, "job/d")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(store, "job/d")); err != nil {
		t.Fatal(err)
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	for lines.Scan() && lines.Text() != "done" {
		if l := lines.Text(); strings.Contains(l, " ok ") {
			t.Errorf("through a folder swapped for a symlink to a root-only directory, as uid %s: %s", nobody, l)
		}
	}
}

// TestLongKeys: a file whose key is 4,095 bytes long (PATH_MAX less one, as the store's filesystem
// accepts relative to the store) can be reached, stated, read, listed and removed through the mount by an
// unprivileged user walking to it folder by folder (before, the daemon put the store path in front of
// every key and the lookups failed with ENAMETOOLONG).
func TestLongKeys(t *testing.T) {
	store := t.TempDir()
	if err := os.Chmod(store, 0o755); err != nil {
		t.Fatal(err)
	}
	e := mountShared(t, store)
	// Folders of 250 bytes below job/, then a file whose name brings the key to exactly 4,095 bytes.
	const keyLen = 4095
	key, dirs := "job", []string{"job"}
	for keyLen-len(key)-1 > 255 {
		c := strings.Repeat(string(rune('a'+len(dirs)%26)), 250)
		dirs = append(dirs, c)
		key += "/" + c
	}
	name := strings.Repeat("f", keyLen-len(key)-1)
	key += "/" + name
	if len(key) != keyLen {
		t.Fatalf("built a key of %d bytes", len(key))
	}
	fd, err := unix.Open(store, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if err := unix.Mkdirat(fd, d, 0o777); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, d, unix.O_PATH|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	ffd, err := unix.Openat(fd, name, unix.O_CREAT|unix.O_WRONLY, 0o666)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = unix.Write(ffd, []byte("deep"))
	unix.Close(ffd)
	unix.Close(fd)
	if out, err := exec.Command("chown", "-R", nobody+":"+nobody, filepath.Join(store, "job")).CombinedOutput(); err != nil {
		t.Fatalf("chown: %v %s", err, out)
	}
	script := `
import os, sys
os.chdir(sys.argv[1])
for d in sys.argv[2].split("/"):
    os.chdir(d)
name = sys.argv[3]
print("stat", os.stat(name).st_size)
print("read", open(name).read())
print("list", os.listdir(".") == [name])
os.unlink(name)
print("gone", not os.path.exists(name))
`
	out, err := asNobody(t, "/usr/bin/python3", "-c", script, e.mnt, strings.Join(dirs, "/"), name)
	want := "stat 4\nread deep\nlist True\ngone True"
	if err != nil || out != want {
		t.Errorf("walking to a %d-byte key through the mount as uid %s: %v\n%s\nwant:\n%s", keyLen, nobody, err, out, want)
	}
}
