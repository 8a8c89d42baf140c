// Package daemon runs a mount in the background the way users expect from mount helpers: the command
// re-executes itself detached (new session, no terminal, output to a log file), the parent waits until the
// child reports the mount ready (or fails, with the child's error), then exits. It also speaks systemd's
// sd_notify protocol, so a unit of Type=notify starts dependants only once the mount is usable.
package daemon

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// readyFDEnv names the descriptor on which a detached child reports readiness to its parent.
const readyFDEnv = "CKGUARD_DAEMON_READY_FD"

// IsChild reports whether this process is the detached child of Detach.
func IsChild() bool { return os.Getenv(readyFDEnv) != "" }

// Detach starts this program again with the same arguments, detached, with stdout and stderr appended to
// logPath, and waits until the child calls Ready (nil) or Fail / exits (the child's error).
func Detach(logPath string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("daemon: find own executable: %w", err)
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("daemon: log file: %w", err)
	}
	defer logf.Close()
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		return err
	}
	defer devnull.Close()
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Env = append(os.Environ(), readyFDEnv+"=3")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = devnull, logf, logf
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		r.Close()
		w.Close()
		return fmt.Errorf("daemon: start: %w", err)
	}
	w.Close()
	line, rerr := bufio.NewReader(r).ReadString('\n')
	r.Close()
	line = strings.TrimSpace(line)
	if rerr == nil && line == "READY" {
		// The child lives on; do not wait for it.
		return cmd.Process.Release()
	}
	if msg, ok := strings.CutPrefix(line, "ERROR "); ok {
		_ = cmd.Wait()
		return errors.New(msg)
	}
	werr := cmd.Wait()
	return fmt.Errorf("daemon: the background process exited before the mount was ready (%v); see %s", werr, logPath)
}

func report(line string) {
	fd := os.Getenv(readyFDEnv)
	if fd == "" {
		return
	}
	os.Unsetenv(readyFDEnv)
	f := os.NewFile(3, "ready")
	if fd != "3" || f == nil {
		return
	}
	fmt.Fprintln(f, line)
	f.Close()
}

// Ready tells the waiting parent (daemon mode) and systemd (Type=notify) that the mount is ready.
func Ready(status string) {
	report("READY")
	notify("READY=1\nSTATUS=" + status)
}

// Starting tells systemd (Type=notify) that the start is still under way: its start timeout is extended to
// extend from now (EXTEND_TIMEOUT_USEC) and status is what `systemctl status` shows.
func Starting(status string, extend time.Duration) {
	notify(fmt.Sprintf("EXTEND_TIMEOUT_USEC=%d\nSTATUS=%s", extend.Microseconds(), status))
}

// KeepStarting calls Starting at once and then every `every` until stop is called (stop waits for the
// last call; more calls do nothing). The mount's first index sync can be a rebuild that takes longer
// than any fixed TimeoutStartSec on a big store (a restart would begin it again, in a loop); while the
// daemon is alive and still in that sync the timeout keeps moving, and it runs out extend after the
// daemon stops extending it.
func KeepStarting(status func() string, every, extend time.Duration) (stop func()) {
	quit, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			Starting(status(), extend)
			select {
			case <-quit:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(quit); <-exited }) }
}

// Fail tells the waiting parent why the child could not mount.
func Fail(err error) {
	report("ERROR " + strings.ReplaceAll(err.Error(), "\n", " "))
}

// Stopping tells systemd the service is shutting down.
func Stopping() { notify("STOPPING=1") }

// notify sends a state string to $NOTIFY_SOCKET if systemd set one; errors are ignored (not under systemd).
func notify(state string) {
	addr := os.Getenv("NOTIFY_SOCKET")
	if addr == "" {
		return
	}
	if strings.HasPrefix(addr, "@") {
		addr = "\x00" + addr[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: addr, Net: "unixgram"})
	if err != nil {
		return
	}
	defer c.Close()
	_, _ = c.Write([]byte(state))
}
