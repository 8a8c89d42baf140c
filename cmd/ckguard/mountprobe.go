package main

// Probing other ckguard mounts of a store: is their daemon still there? The stat that tells runs in
// a child process, never in a thread of the command: a stat of a mount whose daemon hangs waits for
// an answer that may never come (and in the kernel's uninterruptible waits not even a kill ends it),
// and a thread of the command waiting there would keep the command from finishing or exiting.

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// statProbeEnv marks a process started by probeMounts: it stats the path in its one argument and
// exits with its verdict (statProbeChild).
const statProbeEnv = "CKGUARD_INTERNAL_STAT_PROBE"

// Exit statuses of a probe child.
const (
	probeAnswered     = 0  // the stat returned (with or without an error other than ENOTCONN)
	probeNotConnected = 10 // ENOTCONN: the mount's daemon is gone
)

// probeTimeout is how long a mount has to answer its probe before it counts as running, unchecked.
const probeTimeout = 3 * time.Second

// statProbeChild makes this process a probe child when it was started as one: it stats the path it
// was given and exits; otherwise it returns at once. main (and the tests' TestMain) call it first.
func statProbeChild() {
	if os.Getenv(statProbeEnv) != "1" || len(os.Args) != 2 {
		return
	}
	var st syscall.Stat_t
	if err := syscall.Stat(os.Args[1], &st); errors.Is(err, syscall.ENOTCONN) {
		os.Exit(probeNotConnected)
	}
	os.Exit(probeAnswered)
}

// mountState is what a probe learnt of a mount.
type mountState int

const (
	mountRunning   mountState = iota // its mountpoint answered: a daemon serves it
	mountStale                       // ENOTCONN: killed, guards nothing
	mountUnchecked                   // no answer within probeTimeout, or the probe could not run: counts as running
)

// probeResult is one mount's probe: its state and, when unchecked, why.
type probeResult struct {
	state mountState
	why   string
}

// probeMounts stats every mountpoint in a child process of its own, all at once, and waits at most
// probeTimeout for them: a mount that has not answered by then is mountUnchecked and its child is
// killed and left to finish on its own (reaped in the background if it ever does). No thread of this
// process ever waits on one of the mounts.
func probeMounts(mountpoints []string) []probeResult {
	out := make([]probeResult, len(mountpoints))
	type done struct {
		i    int
		code int
		err  error
	}
	ch := make(chan done, len(mountpoints))
	started := make([]*exec.Cmd, len(mountpoints)) // nil: not started
	pending := 0
	for i, mnt := range mountpoints {
		// /proc/self/exe: this very binary, even if its file was replaced or removed since it started.
		cmd := exec.Command("/proc/self/exe", mnt)
		cmd.Env = append(os.Environ(), statProbeEnv+"=1")
		if err := cmd.Start(); err != nil {
			out[i] = probeResult{mountUnchecked, fmt.Sprintf("its mountpoint could not be probed: %v", err)}
			continue
		}
		started[i] = cmd
		pending++
		go func(i int, cmd *exec.Cmd) {
			err := cmd.Wait()
			code := -1
			if cmd.ProcessState != nil {
				code = cmd.ProcessState.ExitCode()
			}
			ch <- done{i, code, err}
		}(i, cmd)
	}
	answered := make([]bool, len(mountpoints))
	timeout := time.NewTimer(probeTimeout)
	defer timeout.Stop()
	for pending > 0 {
		select {
		case d := <-ch:
			pending--
			answered[d.i] = true
			switch d.code {
			case probeAnswered:
				out[d.i] = probeResult{state: mountRunning}
			case probeNotConnected:
				out[d.i] = probeResult{state: mountStale}
			default:
				out[d.i] = probeResult{mountUnchecked, fmt.Sprintf("the probe of its mountpoint failed: %v", d.err)}
			}
		case <-timeout.C:
			for i, cmd := range started {
				if cmd != nil && !answered[i] {
					_ = cmd.Process.Kill()
					out[i] = probeResult{mountUnchecked, fmt.Sprintf("its mountpoint did not answer a stat within %s (a hung or overloaded mount daemon)", probeTimeout)}
				}
			}
			return out
		}
	}
	return out
}
