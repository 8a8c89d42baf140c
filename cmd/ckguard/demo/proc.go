package demo

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/ckguard/ckguard/fs/mountutil"
)

var lookPath = exec.LookPath

// runner runs the real tools (rm, find, ckguard) in the demo's work directory, so that the command
// lines the demo prints are exactly the ones it ran.
type runner struct {
	dir string
	exe string   // the ckguard binary
	env []string // extra environment for ckguard children
}

// result is one finished command.
type result struct {
	stdout, stderr string
	code           int
}

// command is name with args in the work directory. The child is sent SIGTERM when the demo dies
// (Pdeathsig), as the mount is: a demo killed with kill -9 while it runs `ckguard pin` would otherwise
// leave that pin running on its own, talking to a mount that is going away.
func (r *runner) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = r.dir
	if name == r.exe {
		cmd.Env = append(os.Environ(), r.env...)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	return cmd
}

// run runs name with args; a non-zero exit is a result, not an error (the demo expects some).
func (r *runner) run(ctx context.Context, name string, args ...string) (result, error) {
	cmd := r.command(ctx, name, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee) && ctx.Err() == nil:
		res.code = ee.ExitCode()
	case ctx.Err() != nil:
		return res, ctx.Err()
	default:
		return res, fmt.Errorf("%s: %w", name, err)
	}
	return res, nil
}

// ckguard runs a ckguard subcommand.
func (r *runner) ckguard(ctx context.Context, args ...string) (result, error) {
	return r.run(ctx, r.exe, args...)
}

// mountProc is `ckguard mount --foreground` running as a child: the demo exercises the real command
// an operator runs, and the child unmounts on its own if the demo dies (Pdeathsig), so nothing stays
// mounted even when the demo is killed.
type mountProc struct {
	cmd    *exec.Cmd
	mnt    string // absolute
	log    string
	exited chan struct{}
	logf   *os.File
}

// startMount starts the mount and waits until the kernel lists it (the initial index sync is done
// by then) or the child fails.
func (r *runner) startMount(ctx context.Context, mntAbs, logPath string, args ...string) (*mountProc, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(r.exe, args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), r.env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start ckguard mount: %w", err)
	}
	m := &mountProc{cmd: cmd, mnt: mntAbs, log: logPath, exited: make(chan struct{}), logf: logf}
	go func() { _ = cmd.Wait(); close(m.exited) }()
	deadline := time.NewTimer(60 * time.Second)
	defer deadline.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if mi, _ := mountutil.Lookup(mntAbs); mi != nil {
			return m, nil
		}
		select {
		case <-m.exited:
			m.logf.Close()
			return nil, fmt.Errorf("ckguard mount exited with %v before mounting:\n%s", cmd.ProcessState, tail(logPath, 20))
		case <-ctx.Done():
			m.stop()
			return nil, ctx.Err()
		case <-deadline.C:
			m.stop()
			return nil, fmt.Errorf("ckguard mount did not mount %s within 60s:\n%s", mntAbs, tail(logPath, 20))
		case <-tick.C:
		}
	}
}

// stop unmounts and waits for the child: SIGTERM (the mount's clean shutdown), then a lazy unmount
// and SIGKILL as a last resort. It reports whether the mountpoint is gone.
func (m *mountProc) stop() error {
	defer m.logf.Close()
	select {
	case <-m.exited:
	default:
		_ = m.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-m.exited:
		case <-time.After(20 * time.Second):
			_ = mountutil.Unmount(m.mnt, true)
			_ = m.cmd.Process.Kill()
			<-m.exited
		}
	}
	if mi, _ := mountutil.Lookup(m.mnt); mi != nil {
		// The daemon is gone but the kernel still lists the mount (it crashed): detach it.
		if err := mountutil.Unmount(m.mnt, true); err != nil {
			return fmt.Errorf("%s is still mounted and lazy unmount failed: %w (run: fusermount3 -u -z %s)", m.mnt, err, m.mnt)
		}
	}
	if mi, _ := mountutil.Lookup(m.mnt); mi != nil {
		return fmt.Errorf("%s is still mounted (run: fusermount3 -u -z %s)", m.mnt, m.mnt)
	}
	return nil
}

// tail returns the last n lines of a file, for error messages.
func tail(p string, n int) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + strings.Join(lines, "\n    ")
}
