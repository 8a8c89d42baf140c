package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountDaemonNeverUsesItsOwnMount: the mount daemon makes no FUSE request to its own mount, from
// mounting to being killed. A daemon thread waiting on its own mount (or a file it holds open there,
// closed with a FLUSH as it exits) cannot finish a kill -9: its other threads, which would answer,
// are gone, and /dev/fuse is closed only once every thread has exited. go-fuse's WaitMount did it
// (its "poll hack" opens .go-fuse-epoll-hack on the new mount); so did a stat of the mountpoint for
// the read-ahead setting. go-fuse's debug log names the caller thread of every request; a canary
// request from stat(1) shows that the lines are still read right.
func TestMountDaemonNeverUsesItsOwnMount(t *testing.T) {
	mntRequire(t)
	tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	p := mntStart(t, tr.Root, "", "--debug")
	// The daemon logs "mounted" once its mount call returned; it syncs every second after that.
	deadline := time.Now().Add(60 * time.Second)
	for !strings.Contains(p.logText(), "msg=mounted") {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon never logged that it mounted:\n%s", p.logText())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, err := os.ReadDir(p.mnt); err != nil {
		t.Fatal(err)
	}
	// A canary request from a process of known id: a single-threaded stat(1), whose thread id is its
	// pid. If the debug lines stop naming callers in a way callerOf reads, the canary is not found and
	// the test fails rather than passing on requests it cannot attribute.
	canary := exec.Command("stat", filepath.Join(p.mnt, "ckguard-selfaccess-canary"))
	_ = canary.Run()            // no such file: a LOOKUP, answered ENOENT
	time.Sleep(2 * time.Second) // let a sync or two run: they must not use the mount either
	tids := map[int]bool{}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		if n, err := strconv.Atoi(task.Name()); err == nil {
			tids[n] = true
		}
	}
	var own []string
	canarySeen := false
	for _, line := range strings.Split(p.logText(), "\n") {
		op, pid, ok := callerOf(line)
		if !ok {
			continue
		}
		if canary.Process != nil && pid == canary.Process.Pid {
			canarySeen = true
		}
		if tids[pid] {
			own = append(own, op+": "+line)
		}
	}
	if !canarySeen {
		t.Fatalf("the request of stat(1) (pid %v) on %s is not among the debug lines as callerOf reads them (has go-fuse's debug format changed?):\n%s",
			canary.Process, p.mnt, strings.Join(mntHead(strings.Split(p.logText(), "\n")), "\n"))
	}
	if len(own) > 0 {
		t.Errorf("the daemon (pid %d) made %d FUSE requests to its own mount %s; killed while one is open it cannot exit:\n%s",
			p.cmd.Process.Pid, len(own), p.mnt, strings.Join(mntHead(own), "\n"))
	}
	p.kill9()
}

// The parts of a go-fuse debug line of a request that callerOf reads: a request's line carries "rx"
// and an upper-case opcode; its caller is the last field "p<thread id>" (or "pid=<id>", "pid <id>").
// Read loosely, so that a reordering of the other fields does not blind the test.
var (
	debugRequest = regexp.MustCompile(`\brx\b`)
	debugOpcode  = regexp.MustCompile(`\b[A-Z][A-Z0-9_]{2,}\b`)
	debugCaller  = regexp.MustCompile(`(?:\bp|\bpid[=: ])(\d+)\b`)
)

// callerOf is the opcode and the caller's thread id of a go-fuse debug line that logs a request
// (e.g. `rx 12: LOOKUP n1 [".go-fuse-epoll-hack"] 20b p4242`); ok is false for any other line.
func callerOf(line string) (op string, tid int, ok bool) {
	if !debugRequest.MatchString(line) {
		return "", 0, false
	}
	op = debugOpcode.FindString(line)
	m := debugCaller.FindAllStringSubmatch(line, -1)
	if op == "" || len(m) == 0 {
		return "", 0, false
	}
	tid, err := strconv.Atoi(m[len(m)-1][1])
	return op, tid, err == nil
}

// TestCallerOfDebugLines: callerOf reads the request lines of go-fuse's debug log, also with their
// fields moved about, and no other line.
func TestCallerOfDebugLines(t *testing.T) {
	for _, tc := range []struct {
		line string
		op   string
		tid  int
		ok   bool
	}{
		{`go-fuse: 2026/12/02 18:00:00 rx 12: LOOKUP n1 [".go-fuse-epoll-hack"] 20b p4242`, "LOOKUP", 4242, true},
		{`rx 7: GETATTR n1 {Fh 0} p17`, "GETATTR", 17, true},
		{`rx 7: GETATTR p17 n1 {Fh 0}`, "GETATTR", 17, true},
		{`rx 9: OPEN n3 {O_RDONLY} pid=99`, "OPEN", 99, true},
		{`rx 9: LOOKUP n1 ["p123"] 5b p88`, "LOOKUP", 88, true},
		{`tx 12:     OK, {n2 g1 tE=1s tA=1s {M0100644 SZ=3}}`, "", 0, false},
		{`doBatchForget: rx 3 1/2: FORGET n5 {Nlookup=1}`, "", 0, false},
		{`level=INFO msg=mounted mountpoint=/mnt`, "", 0, false},
	} {
		op, tid, ok := callerOf(tc.line)
		if op != tc.op || tid != tc.tid || ok != tc.ok {
			t.Errorf("callerOf(%q) = %q, %d, %v; want %q, %d, %v", tc.line, op, tid, ok, tc.op, tc.tid, tc.ok)
		}
	}
}
