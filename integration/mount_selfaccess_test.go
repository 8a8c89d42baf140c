package integration

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
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
// the read-ahead setting. go-fuse's debug log names the caller thread of every request.
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
	time.Sleep(2 * time.Second) // let a sync or two run: they must not use the mount either
	tids := map[string]bool{}
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.cmd.Process.Pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, task := range tasks {
		tids[task.Name()] = true
	}
	// go-fuse debug: "rx 12: LOOKUP n1 [".go-fuse-epoll-hack"] 20b p4242" (p: the caller's thread id).
	rx := regexp.MustCompile(`rx \d+: (\S+) .* p(\d+)$`)
	var own []string
	for _, line := range strings.Split(p.logText(), "\n") {
		if m := rx.FindStringSubmatch(line); m != nil && tids[m[2]] {
			own = append(own, line)
		}
	}
	if len(own) > 0 {
		t.Errorf("the daemon (pid %d) made %d FUSE requests to its own mount %s; killed while one is open it cannot exit:\n%s",
			p.cmd.Process.Pid, len(own), p.mnt, strings.Join(mntHead(own), "\n"))
	}
	p.kill9()
}
