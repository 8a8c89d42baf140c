package localfs

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/internal/fusetest"
	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// indexed is a guard mount over a generated store with the real index (grace, active window, references),
// for the scenarios that depend on the index's rules rather than on a fake.
type indexed struct {
	tree *treegen.Tree
	mnt  string
	job  string
	ix   *refindex.Index
}

func (x *indexed) m(k string) string     { return filepath.Join(x.mnt, filepath.FromSlash(k)) }
func (x *indexed) store(k string) string { return filepath.Join(x.tree.Root, filepath.FromSlash(k)) }

// mountIndexed mounts the YoungOrphan scenario plus an in-flight checkpoint chk-78 (two private state files
// written a minute ago, no _metadata yet).
func mountIndexed(t *testing.T) *indexed {
	t.Helper()
	return mountIndexedOver(t, nil)
}

// mountIndexedOver is mountIndexed with the index reading the store through wrap (nil: directly).
func mountIndexedOver(t *testing.T, wrap func(store.Store) store.Store) *indexed {
	t.Helper()
	fusetest.Require(t)
	ctx := context.Background()
	base := t.TempDir()
	now := time.Now()
	tr, err := treegen.YoungOrphan(filepath.Join(base, "store"), now)
	if err != nil {
		t.Fatal(err)
	}
	x := &indexed{tree: tr, mnt: filepath.Join(base, "mnt"), job: "flink/fedcba9876543210fedcba9876543210"}
	for _, f := range []string{"inflight-state", "inflight-state-2"} {
		if err := tr.Write(x.job+"/chk-78/"+f, 8192, now.Add(-time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	var st store.Store
	st, err = localstore.New(tr.Root)
	if err != nil {
		t.Fatal(err)
	}
	if wrap != nil {
		st = wrap(st)
	}
	x.ix, err = refindex.Open(filepath.Join(base, "index"), st, refindex.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.ix.Close() })
	if err := x.ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: x.ix})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(x.mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	m, err := Mount(Options{Store: tr.Root, Mountpoint: x.mnt, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", x.mnt).Run()
		}
	})
	return x
}

func runCmd(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// TestMetadataCommitRuleIsNarrow: Flink's recoverable-writer commit
// (._metadata.inprogress.<uuid> -> _metadata in the same folder) passes although its source is in grace; a
// whole in-flight checkpoint folder or an in-flight state file renamed onto _metadata does not.
func TestMetadataCommitRuleIsNarrow(t *testing.T) {
	x := mountIndexed(t)
	chk := x.job + "/chk-78"
	if out, err := runCmd("mv", "-T", x.m(chk), x.m(x.job+"/_metadata")); err == nil {
		t.Errorf("mv -T chk-78 _metadata succeeded; the in-flight checkpoint left its folder")
	} else if !strings.Contains(out, "not permitted") {
		t.Errorf("mv -T chk-78 _metadata: %v %s, want EPERM", err, out)
	}
	if out, err := runCmd("mv", x.m(chk+"/inflight-state-2"), x.m(chk+"/_metadata")); err == nil {
		t.Errorf("mv chk-78/inflight-state-2 chk-78/_metadata succeeded")
	} else if !strings.Contains(out, "not permitted") {
		t.Errorf("mv inflight-state-2 _metadata: %v %s, want EPERM", err, out)
	}
	for _, k := range []string{chk + "/inflight-state", chk + "/inflight-state-2"} {
		if _, err := os.Lstat(x.store(k)); err != nil {
			t.Errorf("%s moved or lost: %v", k, err)
		}
	}

	// A hard-linked in-progress file is not a commit: its other name could be anything.
	// The job manager's chk-78/_metadata, referencing the in-flight files (generated, then taken out of the
	// store: only its bytes are needed).
	ck78, err := x.tree.Checkpoint(treegen.Spec{Dir: chk, ID: 78, Completed: time.Now(), Private: []string{"inflight-state", "inflight-state-2"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(x.store(ck78.Metadata))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(x.store(ck78.Metadata)); err != nil {
		t.Fatal(err)
	}
	tmp := chk + "/._metadata.inprogress.6f1c2a9e-0b1d-4c3e-9a7f-1d2e3f4a5b6c"
	if err := os.WriteFile(x.m(tmp), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(x.store(tmp), x.store(chk+"/alias")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // the kernel's cached nlink of tmp expires
	if err := os.Rename(x.m(tmp), x.m(chk+"/_metadata")); !errors.Is(err, syscall.EPERM) {
		t.Errorf("commit of a hard-linked in-progress file: %v, want EPERM", err)
	}
	if err := os.Remove(x.store(chk + "/alias")); err != nil {
		t.Fatal(err)
	}

	// Flink's commit.
	if err := os.Rename(x.m(tmp), x.m(chk+"/_metadata")); err != nil {
		t.Fatalf("Flink's _metadata commit refused: %v", err)
	}
	d := x.ix.Decide(context.Background(), chk+"/_metadata", verdict.OpUnlink)
	if d.Allow {
		t.Errorf("the committed chk-78/_metadata is deletable at once: %+v", d)
	}
	if d := x.ix.Decide(context.Background(), chk+"/inflight-state", verdict.OpUnlink); d.Allow || d.Reason != verdict.ReasonReferenced {
		t.Errorf("a file chk-78 references is not protected as referenced right after the commit: %+v", d)
	}
}

// TestPunchHoleDecidedAsTruncate: fallocate modes that destroy data are decided like a
// truncation, so an in-flight file cannot be hole-punched through the mount; plain preallocation passes.
func TestPunchHoleDecidedAsTruncate(t *testing.T) {
	x := mountIndexed(t)
	k := x.job + "/chk-78/inflight-state"
	before, err := os.ReadFile(x.store(k))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := runCmd("fallocate", "-p", "-o", "0", "-l", "8192", x.m(k)); err == nil {
		t.Errorf("fallocate -p of an in-flight file through the mount succeeded")
	} else if !strings.Contains(out, "not permitted") {
		t.Errorf("fallocate -p: %v %s, want EPERM", err, out)
	}
	if after, err := os.ReadFile(x.store(k)); err != nil || !bytes.Equal(after, before) {
		t.Errorf("in-flight file changed: %v", err)
	}

	// On a descriptor the writer already holds (its own new file, in grace): preallocation passes, every
	// data-destroying mode is refused.
	f, err := os.OpenFile(x.m(x.job+"/chk-78/new-state"), os.O_CREATE|os.O_EXCL|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(bytes.Repeat([]byte{'s'}, 8192)); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	if err := unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20); err != nil {
		t.Errorf("preallocation (KEEP_SIZE): %v", err)
	}
	for name, mode := range map[string]uint32{
		"PUNCH_HOLE": unix.FALLOC_FL_PUNCH_HOLE | unix.FALLOC_FL_KEEP_SIZE,
		"ZERO_RANGE": unix.FALLOC_FL_ZERO_RANGE,
		"COLLAPSE":   unix.FALLOC_FL_COLLAPSE_RANGE,
		"INSERT":     unix.FALLOC_FL_INSERT_RANGE,
	} {
		err := unix.Fallocate(fd, mode, 0, 4096)
		// The kernel's FUSE client sends only KEEP_SIZE, PUNCH_HOLE and ZERO_RANGE; it answers the other
		// modes with EOPNOTSUPP itself (the mount refuses them too should a kernel ever pass them on).
		if !errors.Is(err, syscall.EPERM) && !(errors.Is(err, syscall.EOPNOTSUPP) && mode&(unix.FALLOC_FL_COLLAPSE_RANGE|unix.FALLOC_FL_INSERT_RANGE) != 0) {
			t.Errorf("fallocate %s of an in-grace file: %v, want EPERM", name, err)
		}
	}
	if b, err := os.ReadFile(x.store(x.job + "/chk-78/new-state")); err != nil || !bytes.Equal(b, bytes.Repeat([]byte{'s'}, 8192)) {
		t.Errorf("new file changed: %v", err)
	}
}

// TestBackdatingDecided: setting a file's mtime into the past through the mount is decided
// like a write (OpWrite): refused for a referenced file; for an in-flight one the mount answers exactly
// what the index answers for OpWrite (refused once OpWrite honours grace); touching
// to now and backdating a deletable file pass.
func TestBackdatingDecided(t *testing.T) {
	x := mountIndexed(t)
	var ref string
	for _, c := range x.tree.Live {
		ref = c.Refs[0]
	}
	inflight := x.job + "/chk-78/inflight-state"
	past := time.Now().Add(-30 * 24 * time.Hour)
	graceRefused := !x.ix.Decide(context.Background(), inflight, verdict.OpWrite).Allow
	if !graceRefused {
		t.Logf("the index allows OpWrite of in-grace files: backdating %s passes", inflight)
	}
	for _, k := range []string{ref, inflight} {
		before, err := os.Stat(x.store(k))
		if err != nil {
			t.Fatal(err)
		}
		wantRefused := k == ref || graceRefused
		out, err := runCmd("touch", "-d", "30 days ago", x.m(k))
		if wantRefused && (err == nil || !strings.Contains(out, "not permitted")) {
			t.Errorf("touch -d '30 days ago' %s: %v %s, want EPERM", k, err, out)
		}
		if !wantRefused && err != nil {
			t.Errorf("touch -d '30 days ago' %s: %v %s, want the index's answer (allowed)", k, err, out)
		}
		if !wantRefused {
			continue
		}
		if err := os.Chtimes(x.m(k), past, past); !errors.Is(err, syscall.EPERM) {
			t.Errorf("utimes into the past of %s: %v, want EPERM", k, err)
		}
		if after, err := os.Stat(x.store(k)); err != nil || !after.ModTime().Equal(before.ModTime()) {
			t.Errorf("%s mtime changed: %v -> %v (%v)", k, before.ModTime(), after.ModTime(), err)
		}
	}
	if out, err := runCmd("touch", x.m(ref)); err != nil {
		t.Errorf("touch (to now) of a referenced file: %v %s", err, out)
	}
	var orphan string
	for k, f := range x.tree.Files {
		if strings.Contains(k, "/shared/") && time.Since(f.ModTime) > 48*time.Hour && !slicesContains(x.tree.Referenced(), k) {
			orphan = k
		}
	}
	if orphan == "" {
		t.Fatal("scenario has no old orphan")
	}
	if err := os.Chtimes(x.m(orphan), past.Add(-24*time.Hour), past.Add(-24*time.Hour)); err != nil {
		t.Errorf("backdating a deletable file: %v", err)
	}
}

func slicesContains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// TestHardLinkedFailsClosed: when the link count cannot be read (anything but "no such file"),
// the content check refuses instead of assuming a single name.
func TestHardLinkedFailsClosed(t *testing.T) {
	enf, err := guard.NewEnforcer(guard.Config{Checker: guardtest.New()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := newRoot(dir, enf, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	if d := root.hardLinked(verdict.OpWrite, "missing"); d != nil {
		t.Errorf("missing file: %+v, want no decision", d)
	}
	// A folder on the way that is a symlink: ELOOP (a key past PATH_MAX, the old way to get an
	// error here, is resolved in chunks now: TestLongKeyResolved).
	if err := os.Symlink("/", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if d := root.hardLinked(verdict.OpWrite, "link/etc/passwd"); d == nil || d.Allow || d.Reason != verdict.ReasonStoreError {
		t.Errorf("unreadable link count: %+v, want a store-error refusal", d)
	}
}

// TestLongKeyResolved: a key past PATH_MAX (25 folders of 200 bytes) is resolved beneath the root in
// chunks: the link count of a file there is read, a missing one is no decision.
func TestLongKeyResolved(t *testing.T) {
	enf, err := guard.NewEnforcer(guard.Config{Checker: guardtest.New()})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	root, err := newRoot(dir, enf, slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat(strings.Repeat("d", 200)+"/", 25)
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 25; i++ {
		unix.Mkdirat(fd, strings.Repeat("d", 200), 0o755)
		nfd, err := unix.Openat(fd, strings.Repeat("d", 200), unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = nfd
	}
	ffd, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Close(ffd)
	unix.Close(fd)
	if d := root.hardLinked(verdict.OpWrite, long+"f"); d != nil {
		t.Errorf("file below a key of %d bytes: %+v, want no decision (one name)", len(long)+1, d)
	}
	if d := root.hardLinked(verdict.OpWrite, long+"missing"); d != nil {
		t.Errorf("missing file below a long key: %+v", d)
	}
}

// TestRenameTargetAppearingIsDecided: the rename target is looked up before the decision; a
// file that appears there in the store between that look and the rename must not be replaced undecided.
func TestRenameTargetAppearingIsDecided(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/chk-1/a", "a")
	var once sync.Once
	e.setDecideHook(func(key string, op verdict.Op) {
		if op == verdict.OpRename {
			once.Do(func() {
				// Another writer creates the target directly in the store; a checkpoint references it.
				e.write(t, "job/chk-1/b", "referenced")
				e.checker.Protect("job/chk-1/b", "job/chk-1/_metadata")
			})
		}
	})
	err := os.Rename(filepath.Join(e.mnt, "job/chk-1/a"), filepath.Join(e.mnt, "job/chk-1/b"))
	if !errors.Is(err, syscall.EPERM) {
		t.Errorf("rename onto a target that appeared during the decision: %v, want EPERM", err)
	}
	if b, err := os.ReadFile(filepath.Join(e.store, "job/chk-1/b")); err != nil || string(b) != "referenced" {
		t.Errorf("target replaced: %q %v", b, err)
	}
	e.setDecideHook(nil)
	if err := os.Rename(filepath.Join(e.mnt, "job/chk-1/a"), filepath.Join(e.mnt, "job/chk-1/c")); err != nil {
		t.Errorf("plain rename: %v", err)
	}
}

// TestSetattrByPathDoesNotFollowSwappedSymlink: truncate(2) by path is decided for the file the
// kernel looked up; a symlink swapped into the store in its place meanwhile (here: during the decision)
// must not redirect the truncation, done with the daemon's rights, to the file it points at.
func TestSetattrByPathDoesNotFollowSwappedSymlink(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/f", "data")
	victim := filepath.Join(t.TempDir(), "victim")
	if err := os.WriteFile(victim, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "job/f")); err != nil { // the kernel knows the regular file
		t.Fatal(err)
	}
	var once sync.Once
	e.setDecideHook(func(key string, op verdict.Op) {
		if key == "job/f" && op == verdict.OpTruncate {
			once.Do(func() {
				p := filepath.Join(e.store, "job/f")
				if err := os.Remove(p); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(victim, p); err != nil {
					t.Error(err)
				}
			})
		}
	})
	_ = os.Truncate(filepath.Join(e.mnt, "job/f"), 0)
	if b, err := os.ReadFile(victim); err != nil || string(b) != "precious" {
		t.Errorf("file outside the store reached through a swapped symlink: %q %v", b, err)
	}
	e.setDecideHook(nil)
	// Without a race, by-path setattr still works on the file itself.
	e.write(t, "job/g", "data")
	if err := os.Truncate(filepath.Join(e.mnt, "job/g"), 2); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(e.mnt, "job/g"), 0o600); err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(filepath.Join(e.store, "job/g")); err != nil || st.Size() != 2 || st.Mode().Perm() != 0o600 {
		t.Errorf("setattr by path: %v %v", st, err)
	}
}

// TestUnlinkDoesNotFollowSwappedFolder: a folder of the store replaced by a symlink after the
// decision must not make the daemon remove a file of the same name where the symlink points.
func TestUnlinkDoesNotFollowSwappedFolder(t *testing.T) {
	e := mountFake(t)
	e.write(t, "job/chk-1/x", "garbage")
	elsewhere := t.TempDir()
	if err := os.WriteFile(filepath.Join(elsewhere, "x"), []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(e.mnt, "job/chk-1/x")); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	e.setDecideHook(func(key string, op verdict.Op) {
		if key == "job/chk-1/x" && op == verdict.OpUnlink {
			once.Do(func() {
				d := filepath.Join(e.store, "job/chk-1")
				if err := os.Rename(d, d+".moved"); err != nil {
					t.Error(err)
				}
				if err := os.Symlink(elsewhere, d); err != nil {
					t.Error(err)
				}
			})
		}
	})
	_ = os.Remove(filepath.Join(e.mnt, "job/chk-1/x"))
	if b, err := os.ReadFile(filepath.Join(elsewhere, "x")); err != nil || string(b) != "precious" {
		t.Errorf("file reached through a swapped folder symlink: %q %v", b, err)
	}
	e.setDecideHook(nil)
	e.write(t, "job/chk-2/y", "garbage")
	if err := os.Remove(filepath.Join(e.mnt, "job/chk-2/y")); err != nil {
		t.Errorf("plain unlink: %v", err)
	}
	if err := syscall.Rmdir(filepath.Join(e.mnt, "job/chk-2")); err != nil {
		t.Errorf("plain rmdir: %v", err)
	}
	e.write(t, "top", "garbage")
	if err := os.Remove(filepath.Join(e.mnt, "top")); err != nil {
		t.Errorf("unlink at the store root: %v", err)
	}
	if e.exists("job/chk-2") || e.exists("top") {
		t.Errorf("not removed")
	}
}

// TestUnlinkGraceJudgesTheFileOnDisk: the grace rule of an unlink judges the file's mtime as stat'ed through
// the folder descriptor the unlink then uses (guard.Target.Observed): a young unreferenced file is refused, an
// old one removed, and the same young file is removed once it was backdated in the store directly (the
// decision reads the file's current mtime, not what the kernel or an earlier decision saw).
func TestUnlinkGraceJudgesTheFileOnDisk(t *testing.T) {
	x := mountIndexed(t)
	young := x.job + "/chk-78/inflight-state"
	old := x.job + "/shared/forgotten-garbage"
	if err := x.tree.Write(old, 100, time.Now().Add(-72*time.Hour)); err != nil {
		t.Fatal(err)
	}
	// Looked up through the mount first, so the kernel holds both files' attributes.
	for _, k := range []string{young, old} {
		if _, err := os.Lstat(x.m(k)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(x.m(young)); !errors.Is(err, syscall.EPERM) {
		t.Errorf("rm of %s, written a minute ago and referenced by nothing: %v, want EPERM (in grace)", young, err)
	}
	if _, err := os.Lstat(x.store(young)); err != nil {
		t.Errorf("%s is gone from the store: %v", young, err)
	}
	if err := os.Remove(x.m(old)); err != nil {
		t.Errorf("rm of %s, three days old and referenced by nothing: %v", old, err)
	}
	if _, err := os.Lstat(x.store(old)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still in the store after an allowed rm: %v", old, err)
	}
	past := time.Now().Add(-72 * time.Hour)
	if err := os.Chtimes(x.store(young), past, past); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(x.m(young)); err != nil {
		t.Errorf("rm of %s after it was backdated in the store: %v, want it removed", young, err)
	}
	if _, err := os.Lstat(x.store(young)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s is still in the store: %v", young, err)
	}
}

// statSpy records, for every key the index describes, whether it judged the mount's observation of it
// (StatObserved) or looked by path (Stat).
type statSpy struct {
	store.Store
	mu       sync.Mutex
	observed map[string]store.ObjectInfo
	plain    map[string]bool
}

func (s *statSpy) Stat(ctx context.Context, key string) (store.ObjectInfo, error) {
	s.mu.Lock()
	s.plain[key] = true
	s.mu.Unlock()
	return s.Store.Stat(ctx, key)
}

func (s *statSpy) StatObserved(ctx context.Context, seen store.ObjectInfo) (store.ObjectInfo, error) {
	s.mu.Lock()
	s.observed[seen.Path] = seen
	s.mu.Unlock()
	return store.StatObserved(ctx, s.Store, seen)
}

// TestUnlinkDecidesOnItsOwnStat: the decision of an unlink through the mount judges the stat the mount took
// through the folder descriptor it unlinks with (guard.Target.Observed), not a second lookup by path, and that
// stat is the file's.
func TestUnlinkDecidesOnItsOwnStat(t *testing.T) {
	spy := &statSpy{observed: map[string]store.ObjectInfo{}, plain: map[string]bool{}}
	x := mountIndexedOver(t, func(st store.Store) store.Store { spy.Store = st; return spy })
	old := x.job + "/shared/forgotten-garbage"
	mtime := time.Now().Add(-72 * time.Hour).Truncate(time.Second)
	if err := x.tree.Write(old, 100, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(x.m(old)); err != nil {
		t.Fatalf("rm %s: %v", old, err)
	}
	spy.mu.Lock()
	defer spy.mu.Unlock()
	o, ok := spy.observed[old]
	if !ok || spy.plain[old] {
		t.Fatalf("the decision about %s stat'ed it by path (observed %v, by path %v), want the mount's observation", old, ok, spy.plain[old])
	}
	if o.Size != 100 || !o.ModTime.Equal(mtime) || o.IsDir {
		t.Errorf("observation of %s = %+v, want size 100, mtime %v", old, o, mtime)
	}
}

// TestBackdatingOwnNewFile: a process that has just created a file through the mount may set its mtime into
// the past (cp -p, tar and rsync -t restoring files: they set the times right after writing each one); the
// same young file backdated by another process (a cleanup script, touch -d) is still decided and refused
// while in grace.
func TestBackdatingOwnNewFile(t *testing.T) {
	x := mountIndexed(t)
	own := x.job + "/shared/restored-by-cp"
	other := x.job + "/shared/written-by-someone-else"
	for _, k := range []string{own, other} {
		if err := os.WriteFile(x.m(k), []byte("restored"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if x.ix.Decide(context.Background(), other, verdict.OpWrite).Allow {
		t.Skip("the index allows OpWrite of in-grace files: backdating is not refused for anyone")
	}
	past := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(x.m(own), past, past); err != nil {
		t.Errorf("backdating a file this process just created through the mount: %v", err)
	}
	if out, err := runCmd("touch", "-d", "30 days ago", x.m(other)); err == nil || !strings.Contains(out, "not permitted") {
		t.Errorf("another process backdating a young file: %v %s, want EPERM", err, out)
	}
	// cp -p as a whole: creates, writes, sets the source's old times.
	src := filepath.Join(t.TempDir(), "old.sst")
	if err := os.WriteFile(src, []byte("from a backup"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(src, past, past); err != nil {
		t.Fatal(err)
	}
	if out, err := runCmd("cp", "-p", src, x.m(x.job+"/shared/restored-by-cp-p")); err != nil {
		t.Errorf("cp -p into the mount: %v %s", err, out)
	}
	if st, err := os.Stat(x.store(x.job + "/shared/restored-by-cp-p")); err != nil || st.ModTime().Sub(past).Abs() > time.Second {
		t.Errorf("cp -p result: %v, want mtime %v", err, past)
	}
}

// TestBackdatingOwnNewFileFromAnotherThread: FUSE names the calling thread, not its process; a
// multithreaded restore tool that creates a file on one thread and sets its times on another is still
// the file's creator.
func TestBackdatingOwnNewFileFromAnotherThread(t *testing.T) {
	x := mountIndexed(t)
	own := x.job + "/shared/restored-by-a-threaded-tool"
	other := x.job + "/shared/in-flight"
	if err := os.WriteFile(x.m(other), []byte("young"), 0o644); err != nil {
		t.Fatal(err)
	}
	if x.ix.Decide(context.Background(), other, verdict.OpWrite).Allow {
		t.Skip("the index allows OpWrite of in-grace files: backdating is not refused for anyone")
	}
	created := make(chan error)
	go func() {
		runtime.LockOSThread() // never unlocked: this thread ends with the goroutine
		created <- os.WriteFile(x.m(own), []byte("restored"), 0o644)
	}()
	if err := <-created; err != nil {
		t.Fatal(err)
	}
	runtime.LockOSThread() // another thread than the creating one, which is gone or still locked
	defer runtime.UnlockOSThread()
	past := time.Now().Add(-30 * 24 * time.Hour)
	if err := os.Chtimes(x.m(own), past, past); err != nil {
		t.Errorf("backdating, from another thread of the creating process: %v", err)
	}
}
