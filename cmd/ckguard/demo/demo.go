package demo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/ckguard/ckguard/fs/mountutil"
	"github.com/ckguard/ckguard/refindex/store"
)

// Config configures one demo run.
type Config struct {
	// Dir is the work directory; "" = a fresh temporary directory, removed afterwards.
	Dir string
	// Exe is the ckguard binary the demo runs (mount, pin, why, verify, umount); Env is added to
	// its environment.
	Exe string
	Env []string
	Out io.Writer
	// Color enables ANSI colours (only on a terminal).
	Color bool
	// SkipControl skips the unguarded run that reproduces the incident.
	SkipControl bool
	// S3 runs the guarded part on an S3 bucket (versitygw on 127.0.0.1) instead of a local directory.
	S3 bool
}

// Result is what the demo measured.
type Result struct {
	Dir            string
	Deleted        int
	DeletedBytes   int64
	Refused        int
	Expected       int // refused files the ground truth predicts
	VerifyOK       bool
	ControlMissing int // files live checkpoints lost in the unguarded run
	Mounted        bool
	Elapsed        time.Duration
}

// Error is a demo that did not behave: Reason says what differed from the ground truth.
type Error struct{ Reason string }

func (e *Error) Error() string { return "demo failed: " + e.Reason }

func failf(format string, a ...any) error { return &Error{Reason: fmt.Sprintf(format, a...)} }

type printer struct {
	w     io.Writer
	color bool
}

func (p *printer) f(format string, a ...any) { fmt.Fprintf(p.w, format, a...) }

func (p *printer) paint(code, s string) string {
	if !p.color {
		return s
	}
	return "\x1b[" + code + "m" + s + "\x1b[0m"
}
func (p *printer) green(s string) string { return p.paint("32;1", s) }
func (p *printer) red(s string) string   { return p.paint("31;1", s) }
func (p *printer) bold(s string) string  { return p.paint("1", s) }
func (p *printer) cmd(s string)          { p.f("   %s %s\n", p.paint("2", "$"), s) }

// Run runs the demo. The error is an *Error when the guard misbehaved, another error when the demo
// could not run (missing tool, no /dev/fuse, Ctrl-C). Nothing is left mounted in either case.
func Run(ctx context.Context, cfg Config) (res *Result, err error) {
	start := time.Now()
	p := &printer{w: cfg.Out, color: cfg.Color}
	res = &Result{}
	dir := cfg.Dir
	temp := dir == ""
	if temp {
		if dir, err = os.MkdirTemp("", "ckguard-demo-"); err != nil {
			return res, err
		}
	} else if dir, err = filepath.Abs(dir); err != nil {
		return res, err
	}
	res.Dir = dir
	if err := preflight(cfg.Exe); err != nil {
		return res, err
	}
	if cfg.S3 {
		// Before the local part, so a missing S3 server is said at once, not after a minute.
		if _, err := versitygwBinary(cfg.Exe); err != nil {
			return res, err
		}
	}
	if !temp {
		// A previous run's stores would not match the ground truth: start again, unless something
		// is still mounted there (removing it would go through the mount).
		for _, sub := range []string{"unguarded", "guarded"} {
			if mi, _ := mountutil.Lookup(filepath.Join(dir, sub, "mnt")); mi != nil {
				return res, fmt.Errorf("%s is still mounted from an earlier run: ckguard umount %s", mi.Mountpoint, mi.Mountpoint)
			}
			if err := os.RemoveAll(filepath.Join(dir, sub)); err != nil {
				return res, err
			}
		}
	}
	p.f("%s\n", p.bold("ckguard demo: the checkpoint-cleanup incident, then the same cleanup through the guard"))
	p.f("work dir: %s", dir)
	if temp {
		p.f(" (removed at the end; --dir DIR keeps it)")
	}
	p.f("\n\n")

	var mnt *mountProc
	defer func() {
		// Whatever happened: unmount, check the kernel's mount table, and only then remove the tree
		// (removing a still-mounted tree would go through the mount).
		if mnt != nil {
			if uerr := mnt.stop(); uerr != nil && err == nil {
				err = uerr
			}
		}
		mp := filepath.Join(dir, "guarded", "mnt")
		if mi, _ := mountutil.Lookup(mp); mi != nil {
			res.Mounted = true
			if err == nil {
				err = fmt.Errorf("%s is still mounted", mp)
			}
			return
		}
		if temp && (err == nil || !errors.As(err, new(*Error))) {
			_ = os.RemoveAll(dir)
		} else if temp {
			p.f("\nkept %s for inspection\n", dir)
		}
		res.Elapsed = time.Since(start)
	}()

	now := time.Now()
	if !cfg.SkipControl {
		if err := control(ctx, p, cfg, filepath.Join(dir, "unguarded"), now, res); err != nil {
			return res, err
		}
	}
	return res, guarded(ctx, p, cfg, filepath.Join(dir, "guarded"), now, res, &mnt)
}

// preflight names what is missing before anything is generated.
func preflight(exe string) error {
	if _, err := os.Stat(exe); err != nil {
		return fmt.Errorf("ckguard binary %s: %w", exe, err)
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return fmt.Errorf("/dev/fuse is missing (%w): the demo mounts a FUSE filesystem; in a container run it with --device /dev/fuse --cap-add SYS_ADMIN", err)
	}
	for _, tool := range []string{"fusermount3", "rm", "find"} {
		if _, err := lookPath(tool); err != nil {
			hint := ""
			if tool == "fusermount3" {
				hint = " (Debian/Ubuntu: apt-get install fuse3; `make setup` does it)"
			}
			return fmt.Errorf("%s not found on PATH%s", tool, hint)
		}
	}
	return nil
}

// describe prints the generated store in plain words, every figure computed from the tree.
func describe(p *printer, s *Scenario) {
	t := s.Tree
	count := func(dir string) (n int, b int64) {
		for k, f := range t.Files {
			if strings.HasPrefix(k, dir+"/") {
				n++
				b += f.Size
			}
		}
		return
	}
	age := func(tm time.Time) string {
		d := t.Now.Sub(tm)
		if d >= 48*time.Hour {
			return fmt.Sprintf("%d days ago", int(d/(24*time.Hour)))
		}
		return fmt.Sprintf("%d minutes ago", int(d/time.Minute))
	}
	curLive := s.LiveUnder(s.CurrentJobDir)
	inherited := 0
	for k := range s.Referenced(curLive) {
		if strings.HasPrefix(k, s.OldJobDir+"/") {
			inherited++
		}
	}
	all := s.Referenced(s.LiveUnder(""))
	var garbage int
	var garbageBytes int64
	for k, f := range t.Files {
		if _, ref := all[k]; !ref && t.Live[k] == nil {
			garbage++
			garbageBytes += f.Size
		}
	}
	n, b := count(s.OldJobDir)
	p.f("   old job      %s/\n                %d files (%s); its last checkpoint %s completed %s: the job is gone, its folder is to be purged\n",
		s.OldJobDir, n, humanize.IBytes(uint64(b)), path.Base(s.Restored), age(t.Live[s.Restored+"/_metadata"].Completed))
	n, b = count(s.CurrentJobDir)
	newest := t.Live[curLive[len(curLive)-1]]
	p.f("   current job  %s/\n                %d files (%s); restored from %s; live %s, the newest completed %s;\n"+
		"                they still reference %d SSTs in the old job's shared/ folder\n",
		s.CurrentJobDir, n, humanize.IBytes(uint64(b)), path.Base(s.Restored), checkpointRange(curLive), age(newest.Completed), inherited)
	n, b = count(s.Savepoint)
	p.f("   savepoint    %s/\n                %d files (%s), taken %s\n", s.Savepoint, n, humanize.IBytes(uint64(b)),
		age(t.Live[s.Savepoint+"/_metadata"].Completed))
	p.f("   garbage      %d files (%s) no checkpoint references: leftovers of subsumed and failed checkpoints, compacted SSTs\n", garbage, humanize.IBytes(uint64(garbageBytes)))
	p.f("   (%d files; _metadata written with ckguard's encoder in Flink's format; mtimes backdated)\n\n", len(t.Files))
}

func checkpointRange(metas []string) string {
	var names []string
	for _, m := range metas {
		names = append(names, path.Base(path.Dir(m)))
	}
	if len(names) <= 2 {
		return strings.Join(names, ", ")
	}
	return names[0] + " … " + strings.TrimPrefix(names[len(names)-1], "chk-")
}

// cleanup runs the two classic cleanup commands against root (a relative path below the work dir):
// `rm -rf` of the old job's folder, then `find -mtime +7 -delete`. It returns what each selected.
type phase struct {
	name      string
	attempted map[string]bool
	deleted   map[string]bool
	stderr    string
	code      int
}

func cleanup(ctx context.Context, p *printer, r *runner, s *Scenario, root, storeAbs string) ([]phase, error) {
	var out []phase
	before, err := snapshot(storeAbs)
	if err != nil {
		return nil, err
	}
	// 1. rm -rf of the old job folder: selects everything below it.
	target := root + "/" + s.OldJobDir
	ph := phase{name: "rm -rf " + target, attempted: map[string]bool{}}
	for k := range before {
		if strings.HasPrefix(k, s.OldJobDir+"/") {
			ph.attempted[k] = true
		}
	}
	p.cmd(ph.name)
	res, err := r.run(ctx, "rm", "-rf", target)
	if err != nil {
		return nil, err
	}
	ph.stderr, ph.code = res.stderr, res.code
	after, err := snapshot(storeAbs)
	if err != nil {
		return nil, err
	}
	ph.deleted = gone(before, after)
	p.f("     %s\n", phaseSummary(p, ph))
	out = append(out, ph)

	// 2. find -mtime +7 -delete: selects files older than 7 whole days (by their backdated mtimes).
	before = after
	ph = phase{name: "find " + root + " -mtime +7 -delete", attempted: map[string]bool{}}
	cut := time.Now().Add(-s.StaleAfter)
	for k, f := range before {
		if f.ModTime.Before(cut) {
			ph.attempted[k] = true
		}
	}
	p.cmd(ph.name)
	res, err = r.run(ctx, "find", root, "-mtime", "+7", "-delete")
	if err != nil {
		return nil, err
	}
	ph.stderr, ph.code = res.stderr, res.code
	if after, err = snapshot(storeAbs); err != nil {
		return nil, err
	}
	ph.deleted = gone(before, after)
	p.f("     %s\n", phaseSummary(p, ph))
	out = append(out, ph)
	return out, nil
}

func phaseSummary(p *printer, ph phase) string {
	refused := len(ph.attempted) - len(ph.deleted)
	s := fmt.Sprintf("exit %d: deleted %d of the %d files it selected", ph.code, len(ph.deleted), len(ph.attempted))
	if refused > 0 {
		s += fmt.Sprintf(", %d refused", refused)
		if first := firstLine(ph.stderr); first != "" {
			s += "\n     e.g. " + first
		}
	}
	return s
}

func firstLine(s string) string {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		if l := strings.TrimSpace(sc.Text()); l != "" {
			return l
		}
	}
	return ""
}

// control runs the cleanup on an unguarded copy of the store: the incident, reproduced.
func control(ctx context.Context, p *printer, cfg Config, dir string, now time.Time, res *Result) error {
	p.f("%s\n", p.bold("1. Without ckguard: the incident"))
	s, err := Build(dir, now)
	if err != nil {
		return err
	}
	describe(p, s)
	r := &runner{dir: dir, exe: cfg.Exe, env: cfg.Env}
	p.cmd("cd " + dir)
	phases, err := cleanup(ctx, p, r, s, "store", s.Tree.Root)
	if err != nil {
		return err
	}
	deleted := map[string]bool{}
	for _, ph := range phases {
		for k := range ph.deleted {
			deleted[k] = true
		}
	}
	p.cmd("ckguard verify --store store --index index")
	v, code, err := verify(ctx, r, []string{"verify", "--store", "store", "--index", "index"})
	if err != nil {
		return err
	}
	// Ground truth: what the current job's live checkpoints need that the cleanup removed.
	needed := s.Referenced(s.LiveUnder(s.CurrentJobDir))
	var lost []string
	for k := range needed {
		if deleted[k] {
			lost = append(lost, k)
		}
	}
	sort.Strings(lost)
	res.ControlMissing = len(lost)
	missingSet := map[string]bool{}
	for _, b := range v.Broken {
		for _, m := range b.Missing {
			missingSet[m] = true
		}
	}
	missing := len(missingSet)
	if code != 1 || v.OK || missing != len(lost) {
		return failf("without the guard, verify should exit 1 and report the %d files the cleanup removed from under live checkpoints; it exited %d, ok=%v, reported %d missing",
			len(lost), code, v.OK, missing)
	}
	p.f("     exit %d: %s — %d live checkpoints of the current job are broken, %d files they need are gone, e.g.\n       %s\n",
		code, p.red("RED"), len(v.Broken), missing, lost[0])
	p.f("   The next restore of the current job fails with FileNotFoundException; the savepoint (%d files) is gone too.\n\n",
		len(s.LiveUnder(s.Savepoint))+len(s.Referenced(s.LiveUnder(s.Savepoint))))
	return nil
}

// verifyResult is the part of `ckguard verify --json` the demo reads.
type verifyResult struct {
	Checked int  `json:"checked"`
	OK      bool `json:"ok"`
	Broken  []struct {
		Metadata     string   `json:"metadata"`
		Missing      []string `json:"missing"`
		MissingCount int      `json:"missing_count"`
		Error        string   `json:"error"`
	} `json:"broken"`
}

func verify(ctx context.Context, r *runner, args []string) (*verifyResult, int, error) {
	out, err := r.ckguard(ctx, append(args, "--json")...)
	if err != nil {
		return nil, 0, err
	}
	var v verifyResult
	if err := json.Unmarshal([]byte(out.stdout), &v); err != nil {
		return nil, out.code, fmt.Errorf("ckguard verify --json exited %d with output that is not JSON (%v):\n%s%s", out.code, err, out.stdout, out.stderr)
	}
	return &v, out.code, nil
}

// guarded runs the same cleanup through the guard mount and checks every outcome.
func guarded(ctx context.Context, p *printer, cfg Config, dir string, now time.Time, res *Result, mp **mountProc) error {
	r := &runner{dir: dir, exe: cfg.Exe, env: cfg.Env}
	gs, stopStore, err := guardedStoreFor(ctx, cfg, dir, r, mp)
	if err != nil {
		return err
	}
	defer stopStore()
	p.f("%s\n", p.bold(gs.title))
	s, err := BuildAt(gs.root, now, gs.uriPrefix)
	if err != nil {
		return err
	}
	switch {
	case cfg.SkipControl:
		describe(p, s)
	case cfg.S3:
		p.f("   The same store, generated again as bucket %s on a local S3 server (versitygw, %s).\n\n", gs.arg, strings.Join(gs.s3flags[:2], " "))
	default:
		p.f("   The same store, generated again in guarded/store.\n\n")
	}
	q := gs.command
	m, err := mountGuarded(ctx, p, r, dir, s, q)
	if err != nil {
		return err
	}
	*mp = m
	if err := pinSavepoint(ctx, p, r, s, q); err != nil {
		return err
	}
	phases, err := cleanup(ctx, p, r, s, "mnt", s.Tree.Root)
	if err != nil {
		return err
	}
	if err := judge(p, s, phases, res); err != nil {
		return err
	}
	if err := explainInheritedRefusal(ctx, p, r, s, q); err != nil {
		return err
	}
	if err := auditSummary(p, filepath.Join(dir, "index", "audit.jsonl")); err != nil {
		return err
	}
	if err := lineage(ctx, p, r, s, q); err != nil {
		return err
	}
	if err := verifyGuardedGreen(ctx, p, r, q, res); err != nil {
		return err
	}
	if err := unmountGuarded(ctx, p, r, m, mp); err != nil {
		return err
	}
	p.f("%s deleted %d files (%s), refused %d (exactly the files live checkpoints reference), verify green\n",
		p.green("RESULT: OK —"), res.Deleted, humanize.IBytes(uint64(res.DeletedBytes)), res.Refused)
	return nil
}

// guardedStore is where the guarded scenario's store lives: a folder, or a bucket on a local S3 server.
type guardedStore struct {
	title     string
	arg       string // the --store value
	root      string // the folder the scenario is generated in (the bucket's data folder on S3)
	uriPrefix string // of the references the scenario's _metadata name ("" for paths)
	s3flags   []string
}

// command is a ckguard command on this store, run from the scenario's folder.
func (gs guardedStore) command(args ...string) []string {
	out := append([]string{args[0], "--store", gs.arg, "--index", "index"}, gs.s3flags...)
	return append(out, args[1:]...)
}

// guardedStoreFor is the scenario's store; with cfg.S3 it starts the S3 server and adds its
// environment to r. The returned stop unmounts a mount still in *mp before it stops the server, so a
// mount never outlives the store it serves.
func guardedStoreFor(ctx context.Context, cfg Config, dir string, r *runner, mp **mountProc) (guardedStore, func(), error) {
	gs := guardedStore{
		title: "2. With ckguard: the same cleanup through the guard mount",
		arg:   "store", root: filepath.Join(dir, "store"),
	}
	if !cfg.S3 {
		return gs, func() {}, nil
	}
	gs.title = "2. With ckguard on S3: the same cleanup through the guard mount of a bucket"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return gs, nil, err
	}
	srv, err := startS3(ctx, cfg.Exe, dir)
	if err != nil {
		return gs, nil, err
	}
	gs.arg, gs.root, gs.uriPrefix = "s3://"+s3Bucket, filepath.Join(srv.data, s3Bucket), "s3://"+s3Bucket
	gs.s3flags = srv.flags()
	r.env = append(append([]string{}, r.env...), s3Env()...)
	return gs, func() {
		if *mp != nil { // unmount before the server goes away
			_ = (*mp).stop()
			*mp = nil
		}
		srv.stop()
	}, nil
}

// mountGuarded mounts the store on dir/mnt in the foreground and waits until it serves.
func mountGuarded(ctx context.Context, p *printer, r *runner, dir string, s *Scenario, q func(...string) []string) (*mountProc, error) {
	mntAbs := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mntAbs, 0o755); err != nil {
		return nil, err
	}
	p.cmd("cd " + dir)
	args := q("mount", "--foreground", "mnt")
	p.cmd("ckguard " + strings.Join(args, " ") + " &")
	t0 := time.Now()
	m, err := r.startMount(ctx, mntAbs, filepath.Join(dir, "mount.log"), args...)
	if err != nil {
		return nil, err
	}
	p.f("     mounted in %.1fs (index built from the store's %d _metadata)\n", time.Since(t0).Seconds(), len(s.Tree.Live))
	return m, nil
}

// pinSavepoint pins the scenario's savepoint: savepoints belong to people, not to the cleanup's age rule.
func pinSavepoint(ctx context.Context, p *printer, r *runner, s *Scenario, q func(...string) []string) error {
	pin := q("pin", s.Savepoint)
	p.cmd("ckguard " + strings.Join(pin, " "))
	if out, err := r.ckguard(ctx, pin...); err != nil {
		return err
	} else if out.code != 0 {
		return fmt.Errorf("ckguard pin exited %d: %s%s", out.code, out.stdout, out.stderr)
	}
	return nil
}

// explainInheritedRefusal asks the guard, as an operator would, why one refused file of the old job
// (referenced by the current job's live checkpoints) was kept; the answer must name a referencing
// checkpoint of the current job.
func explainInheritedRefusal(ctx context.Context, p *printer, r *runner, s *Scenario, q func(...string) []string) error {
	var inherited []string
	for k := range s.Referenced(s.LiveUnder(s.CurrentJobDir)) {
		if strings.HasPrefix(k, s.OldJobDir+"/") {
			inherited = append(inherited, k)
		}
	}
	sort.Strings(inherited)
	p.f("\n   Why was %s refused?\n", path.Base(inherited[0]))
	why := q("why", inherited[0])
	p.cmd("ckguard " + strings.Join(why, " "))
	out, err := r.ckguard(ctx, why...)
	if err != nil {
		return err
	}
	p.f("%s", indent(out.stdout+out.stderr, "     "))
	if !strings.Contains(out.stdout+out.stderr, path.Base(path.Dir(s.LiveUnder(s.CurrentJobDir)[0]))) {
		return failf("ckguard why did not name a referencing checkpoint of the current job:\n%s%s", out.stdout, out.stderr)
	}
	return nil
}

// verifyGuardedGreen runs verify after the guarded cleanup and records in res whether it is green
// (exit 0, nothing broken); anything else fails the demo.
func verifyGuardedGreen(ctx context.Context, p *printer, r *runner, q func(...string) []string, res *Result) error {
	p.f("\n")
	p.cmd("ckguard " + strings.Join(q("verify"), " "))
	v, code, err := verify(ctx, r, q("verify"))
	if err != nil {
		return err
	}
	res.VerifyOK = code == 0 && v.OK
	if !res.VerifyOK {
		return failf("verify after the guarded cleanup: exit %d, %d broken checkpoints (want exit 0, none broken)", code, len(v.Broken))
	}
	p.f("     exit 0: %s — all %d live checkpoints and savepoints have every file they reference\n", p.green("GREEN"), v.Checked)
	return nil
}

// unmountGuarded unmounts with `ckguard umount` and waits for the mount process to end; *mp is cleared
// once the umount succeeded, so the caller's teardown does not stop it again.
func unmountGuarded(ctx context.Context, p *printer, r *runner, m *mountProc, mp **mountProc) error {
	p.cmd("ckguard umount mnt")
	if out, err := r.ckguard(ctx, "umount", "mnt"); err != nil {
		return err
	} else if out.code != 0 {
		return fmt.Errorf("ckguard umount exited %d: %s%s", out.code, out.stdout, out.stderr)
	}
	*mp = nil
	if err := m.stop(); err != nil {
		return err
	}
	p.f("     unmounted; nothing left in /proc/self/mountinfo\n\n")
	return nil
}

// judge compares what the guarded cleanup deleted with the ground truth and prints it per folder.
// Ground truth: the cleanup retires the old job's checkpoints (its folder is purged and its newest
// checkpoint is older than the active window); the current job's checkpoints and the pinned
// savepoint stay live, and exactly the files they reference must survive.
func judge(p *printer, s *Scenario, phases []phase, res *Result) error {
	stay := append(s.LiveUnder(s.CurrentJobDir), s.LiveUnder(s.Savepoint)...)
	keep := s.Referenced(stay)
	for _, m := range stay {
		keep[m] = m
	}
	attempted, deleted := map[string]bool{}, map[string]bool{}
	for _, ph := range phases {
		for k := range ph.attempted {
			attempted[k] = true
		}
		for k := range ph.deleted {
			deleted[k] = true
		}
	}
	type row struct{ deleted, refused int }
	rows := map[string]*row{}
	var wrong []string
	expected := 0
	for k := range attempted {
		f := folderOf(k)
		if rows[f] == nil {
			rows[f] = &row{}
		}
		_, mustKeep := keep[k]
		if mustKeep {
			expected++
		}
		switch {
		case deleted[k] && mustKeep:
			wrong = append(wrong, "deleted although a live checkpoint needs it: "+k)
		case !deleted[k] && !mustKeep:
			wrong = append(wrong, "refused although nothing needs it: "+k)
		}
		if deleted[k] {
			rows[f].deleted++
			res.Deleted++
			res.DeletedBytes += s.Tree.Files[k].Size
		} else {
			rows[f].refused++
			res.Refused++
		}
	}
	res.Expected = expected
	folders := make([]string, 0, len(rows))
	for f := range rows {
		folders = append(folders, f)
	}
	sort.Strings(folders)
	p.f("\n   What happened, folder by folder (checked against the generator's ground truth):\n")
	p.f("     %-62s %8s %8s\n", "folder", "deleted", "refused")
	for _, f := range folders {
		p.f("     %-62s %8d %8d  %s\n", f, rows[f].deleted, rows[f].refused, reasonFor(s, f, rows[f].refused))
	}
	p.f("     %-62s %8d %8d\n", "total", res.Deleted, res.Refused)
	if len(wrong) > 0 {
		sort.Strings(wrong)
		if len(wrong) > 10 {
			wrong = append(wrong[:10], fmt.Sprintf("… and %d more", len(wrong)-10))
		}
		return failf("the guarded cleanup did not match the ground truth:\n  %s", strings.Join(wrong, "\n  "))
	}
	p.f("   Refused set == referenced set: all %d refused files are needed by a live checkpoint or the pinned savepoint,\n"+
		"   and every file the cleanup selected that nothing needs was deleted.\n", res.Refused)
	// Explain why more than the garbage went: rm -rf met each old checkpoint's _metadata first (the
	// mount lists it first), deleting it retired the checkpoint, and the files only it needed followed.
	retired := s.LiveUnder(s.OldJobDir)
	freed := 0
	for k := range s.Referenced(retired) {
		if _, needed := keep[k]; !needed && deleted[k] {
			freed++
		}
	}
	if len(retired) > 0 && freed > 0 {
		p.f("   %d of the deleted files belonged to the old job's live %s: its _metadata and the files only it\n"+
			"   referenced. The mount lists _metadata first, so rm -rf retired the checkpoint before reaching its files,\n"+
			"   and one pass deleted them.\n", freed+len(retired), checkpointRange(retired))
	}
	return nil
}

// folderOf groups a store key by job folder and its first sub-folder (shared, chk-N, taskowned).
func folderOf(k string) string {
	segs := strings.Split(k, "/")
	for i, seg := range segs {
		if seg == "shared" || seg == "taskowned" || strings.HasPrefix(seg, "chk-") || strings.HasPrefix(seg, "savepoint-") {
			return strings.Join(segs[:i+1], "/")
		}
	}
	return path.Dir(k)
}

func reasonFor(s *Scenario, folder string, refused int) string {
	if refused == 0 {
		return ""
	}
	switch {
	case strings.HasPrefix(folder, s.Savepoint):
		return "(pinned savepoint and its files)"
	case strings.HasPrefix(folder, s.OldJobDir):
		return "(referenced by the current job's live checkpoints)"
	default:
		return "(referenced by live checkpoints)"
	}
}

// lineage shows `ckguard graph`: which job folders the live checkpoints depend on. It writes the
// picture (SVG with Graphviz, else DOT) next to the store and prints the edges in words.
func lineage(ctx context.Context, p *printer, r *runner, s *Scenario, q func(...string) []string) error {
	args := q("graph", "--json")
	p.f("\n   Which job folders do the live checkpoints depend on?\n")
	p.cmd("ckguard " + strings.Join(args, " "))
	out, err := r.ckguard(ctx, args...)
	if err != nil {
		return err
	}
	var g struct {
		Edges []struct {
			From, To     string
			Files, Bytes int64
		}
		Folders []string `json:"referenced_folders_without_checkpoints"`
	}
	if out.code != 0 || json.Unmarshal([]byte(out.stdout), &g) != nil {
		return failf("ckguard graph --json exited %d:\n%s%s", out.code, out.stdout, out.stderr)
	}
	toOld := 0
	for _, e := range g.Edges {
		p.f("     %s  →  %s/  (%d files, %s)\n", path.Dir(e.From), e.To, e.Files, humanize.IBytes(uint64(e.Bytes)))
		if e.To == s.OldJobDir {
			toOld++
		}
	}
	for _, f := range g.Folders {
		p.f("     %s/ has no live checkpoint left but is still referenced: never purge it by age or name\n", f)
	}
	if toOld != len(s.LiveUnder(s.CurrentJobDir)) {
		return failf("ckguard graph shows %d edges from the current job's checkpoints to %s, want %d", toOld, s.OldJobDir, len(s.LiveUnder(s.CurrentJobDir)))
	}
	svg := q("graph", "-o", "lineage.svg")
	if out, err := r.ckguard(ctx, svg...); err != nil {
		return err
	} else if out.code != 0 {
		return failf("ckguard graph -o lineage.svg exited %d: %s", out.code, out.stderr)
	}
	p.cmd("ckguard " + strings.Join(svg, " ") + "   # the picture (SVG with Graphviz installed, else DOT)")
	return nil
}

// auditSummary counts the mount's audit records by decision and reason.
func auditSummary(p *printer, file string) error {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return failf("the mount wrote no audit log at %s", file)
		}
		return err
	}
	defer f.Close()
	counts := map[string]int{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec struct{ Op, Decision, Reason string }
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		counts[rec.Decision+" "+rec.Op+" ("+rec.Reason+")"]++
	}
	keys := make([]string, 0, len(counts))
	for k := range counts {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	p.f("\n   The audit log (index/audit.jsonl) has one JSON line per decision:\n")
	for _, k := range keys {
		p.f("     %5d × %s\n", counts[k], k)
	}
	return sc.Err()
}

func indent(s, pre string) string {
	s = strings.TrimRight(s, "\n")
	if s == "" {
		return ""
	}
	return pre + strings.ReplaceAll(s, "\n", "\n"+pre) + "\n"
}

// file is one object of a store snapshot.
type file struct {
	Size    int64
	ModTime time.Time
}

// snapshot lists every regular file below root as store keys: the truth the demo checks against,
// read from the store itself, not through the mount or the index.
func snapshot(root string) (map[string]file, error) {
	out := map[string]file{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && filepath.Dir(p) == filepath.Clean(root) && d.Name() == store.QuarantineDir {
			// Deletions the mount staged (--quarantine): gone from the store's data.
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel(root, p)
			if isServerFile(filepath.ToSlash(rel)) {
				return nil
			}
			out[filepath.ToSlash(rel)] = file{Size: fi.Size(), ModTime: fi.ModTime()}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list store %s: %w", root, err)
	}
	return out, nil
}

func gone(before, after map[string]file) map[string]bool {
	out := map[string]bool{}
	for k := range before {
		if _, ok := after[k]; !ok {
			out[k] = true
		}
	}
	return out
}
