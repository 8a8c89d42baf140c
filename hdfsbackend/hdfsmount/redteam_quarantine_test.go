package hdfsmount_test

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// TestRedteamQuarantineAsNobody: an unprivileged local user (nobody) on an --allow-other HDFS mount
// with a quarantine, in a store whose HDFS modes let anyone write (777). They cannot reach, make or
// rename into the area; names that look like entries (the `~` fields of a self-describing name, a
// record's .json) are ordinary files of theirs, never entries; what they delete (a name with `~`, a
// path longer than an entry name holds, a 255-byte name) is staged under exactly its key; and a
// restore onto a path they made meanwhile (a file, a folder) never replaces it. Afterwards the area
// holds exactly what was staged.
func TestRedteamQuarantineAsNobody(t *testing.T) {
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root: the daemon mounts with allow_other and the test switches to nobody")
	}
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Skip("no setpriv")
	}
	ctx := context.Background()
	f := hdfsfake.New("flink")
	long := strings.Repeat("d", 200)
	name255 := strings.Repeat("n", 255)
	for _, d := range []string{dir, dir + "/job", dir + "/job/" + long} {
		if err := f.MkdirAll(ctx, d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	files := map[string]string{
		"job/a~unlink~0~0~1~Y29tbQ~am9iL3JlZg": "looks like an entry", // a self-describing name's shape
		"job/tilde~name":                       "tilde",
		"job/" + long + "/deep":                "deep",
		"job/" + name255:                       "255",
		"job/ref":                              "referenced",
		"job/occupied-file":                    "old content",
		"job/occupied-dir":                     "old content",
	}
	for k, body := range files {
		if err := f.Put(dir+"/"+k, []byte(body), old); err != nil {
			t.Fatal(err)
		}
	}
	a, err := hdfsquarantine.Open(ctx, f, dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	ck := guardtest.New()
	ck.Protect("job/ref", "job/chk-1/_metadata")
	enf, mnt := redteamEnforcerAndMountpoint(t, ck)
	m, err := hdfsmount.Mount(ctx, hdfsmount.Options{FS: f, Dir: dir, Name: "hdfs://nn:8020" + dir, Mountpoint: mnt, Enforcer: enf, Quarantine: a, AllowOther: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
	})

	script := `import os, sys
def attempt(name, f):
    try:
        f()
        print(name, "OK")
    except OSError as e:
        print(name, e.errno)
m, q, long, n255 = sys.argv[1:5]
M = lambda rel: os.path.join(m, rel)
print("listed", int(q in os.listdir(m)))
attempt("q-stat", lambda: os.stat(M(q)))
attempt("q-stat-dotdot", lambda: os.stat(M("job/../" + q)))
attempt("q-mkdir", lambda: os.mkdir(M(q)))
attempt("q-create", lambda: os.close(os.open(M(q), os.O_CREAT | os.O_WRONLY, 0o644)))
attempt("q-rename-into", lambda: os.rename(M("job/tilde~name"), M(q)))
attempt("q-create-record", lambda: open(M("job/1796182064177140694-b447c01b261ad2fc.json"), "w").write("{}"))
attempt("rm-ref", lambda: os.unlink(M("job/ref")))
attempt("rm-lookalike", lambda: os.unlink(M("job/a~unlink~0~0~1~Y29tbQ~am9iL3JlZg")))
attempt("rm-tilde", lambda: os.unlink(M("job/tilde~name")))
attempt("rm-long", lambda: os.unlink(M("job/" + long + "/deep")))
attempt("rm-255", lambda: os.unlink(M("job/" + n255)))
attempt("rm-occupied-file", lambda: os.unlink(M("job/occupied-file")))
attempt("rm-occupied-dir", lambda: os.unlink(M("job/occupied-dir")))
attempt("make-file", lambda: open(M("job/occupied-file"), "w").write("mine"))
attempt("make-dir", lambda: os.mkdir(M("job/occupied-dir")))
`
	cmd := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--", "/usr/bin/python3", "-c", script,
		mnt, store.QuarantineDir, long, name255)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("python as nobody: %v\n%s", err, out)
	}
	got := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if fl := strings.Fields(sc.Text()); len(fl) == 2 {
			got[fl[0]] = fl[1]
		}
	}
	t.Logf("results (errno or OK): %v", got)
	for k, v := range map[string]string{
		"listed": "0", "q-stat": "2", "q-stat-dotdot": "2", "q-mkdir": "1", "q-create": "1", "q-rename-into": "1",
		"q-create-record": "OK", "rm-ref": "1",
		"rm-lookalike": "OK", "rm-tilde": "OK", "rm-long": "OK", "rm-255": "OK", "rm-occupied-file": "OK", "rm-occupied-dir": "OK",
		"make-file": "OK", "make-dir": "OK",
	} {
		if got[k] != v {
			t.Errorf("%s as nobody: %q, want %s", k, got[k], v)
		}
	}

	// As the daemon: the area holds exactly what was staged, under exactly its keys.
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(probs) != 0 {
		t.Fatalf("area: %v, problems %v", err, probs)
	}
	byKey := map[string]quarantine.Entry{}
	for _, e := range es {
		byKey[e.Key()] = e
		if e.Decision.UID != 65534 {
			t.Errorf("entry %s: uid %d, want the caller's 65534", e.Key(), e.Decision.UID)
		}
	}
	staged := []string{"job/a~unlink~0~0~1~Y29tbQ~am9iL3JlZg", "job/tilde~name", "job/" + long + "/deep", "job/" + name255, "job/occupied-file", "job/occupied-dir"}
	if len(es) != len(staged) {
		t.Errorf("%d entries, want %d: %v", len(es), len(staged), es)
	}
	for _, k := range staged {
		e, ok := byKey[k]
		if !ok {
			t.Errorf("%s not staged", k)
			continue
		}
		if strings.HasPrefix(k, "job/occupied-") {
			if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrOccupied) {
				t.Errorf("restore of %s onto what nobody made there: %v, want ErrOccupied", k, err)
			}
			continue
		}
		if _, err := a.Restore(ctx, e.ID); err != nil {
			t.Errorf("restore %s: %v", k, err)
			continue
		}
		if b, err := f.ReadFile(dir + "/" + k); err != nil || string(b) != files[k] {
			t.Errorf("restored %s: %q %v, want %q", k, b, err, files[k])
		}
	}
	if b, err := f.ReadFile(dir + "/job/occupied-file"); err != nil || string(b) != "mine" {
		t.Errorf("the file nobody made at a staged path: %q %v", b, err)
	}
	if fi, err := f.Stat(ctx, dir+"/job/occupied-dir"); err != nil || !fi.IsDir {
		t.Errorf("the folder nobody made at a staged path: %+v %v", fi, err)
	}
	if b, err := f.ReadFile(dir + "/job/ref"); err != nil || string(b) != "referenced" {
		t.Errorf("referenced file: %q %v", b, err)
	}
}
