package integration

import (
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// fleetBackend is a store kind TestFleetSharedPins runs on (the hdfs tag adds HDFS).
type fleetBackend struct {
	name   string
	mounts int
	setup  func(t *testing.T) (store string, tr *treegen.Tree, flags []string)
}

var fleetBackends = []fleetBackend{
	{"local", 3, func(t *testing.T) (string, *treegen.Tree, []string) {
		tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
		if err != nil {
			t.Fatal(err)
		}
		return tr.Root, tr, nil
	}},
	{"s3", 3, func(t *testing.T) (string, *treegen.Tree, []string) {
		e := s3Start(t)
		tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
		return s3Root, tr, e.mountArgs()
	}},
}

// TestFleetSharedPins: three mounts (three processes, three index folders) of one store with
// --shared, on a local store and on one versitygw bucket. A pin made through mount 1 refuses the
// checkpoint's deletion on mounts 2 and 3 after one sync; `ckguard fleet` lists the three mounts and
// the pin with who and why; an unpin through mount 3 releases it everywhere; the shared state folder
// is invisible and untouchable through every mount.
func TestFleetSharedPins(t *testing.T) {
	mntRequire(t)
	for _, tc := range fleetBackends {
		t.Run(tc.name, func(t *testing.T) {
			store, tr, flags := tc.setup(t)
			const interval = 2 * time.Second
			mflags := append(append([]string{}, flags...), "--shared", "--sync-interval", interval.String())
			var ps []*mntProc
			for range tc.mounts {
				ps = append(ps, mntStart(t, store, "", mflags...))
			}
			// An observer: the shared pins protect through it; it writes nothing into the area.
			obs := mntStart(t, store, "", append(append([]string{}, flags...), "--shared-read-only", "--sync-interval", interval.String())...)
			cli := func(p *mntProc, args ...string) (string, int) {
				t.Helper()
				out, code := p.cli(append(args, flags...)...)
				t.Logf("ckguard %s: exit %d: %s", strings.Join(args, " "), code, strings.TrimSpace(out))
				return out, code
			}
			state := func(p *mntProc, key string) string {
				t.Helper()
				buf := make([]byte, 256)
				n, err := syscall.Getxattr(p.m(key), "user.ckguard.state", buf)
				if err != nil {
					t.Fatalf("state of %s on %s: %v", key, p.mnt, err)
				}
				return string(buf[:n])
			}
			var metas []string
			for m := range tr.Live {
				metas = append(metas, m)
			}
			sort.Strings(metas)
			var target string
			for _, m := range metas {
				if state(ps[0], m) == "deletable" {
					target = m
					break
				}
			}
			if target == "" {
				t.Fatalf("no deletable live checkpoint to pin among %v", metas)
			}
			for i, p := range ps[1:] {
				if got := state(p, target); got != "deletable" {
					t.Fatalf("mount %d finds %s %s before any pin", i+2, target, got)
				}
			}

			// The shared folder is ckguard's: not listed, not reachable, not removable through a mount.
			for _, p := range ps {
				ents, err := os.ReadDir(p.mnt)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range ents {
					if e.Name() == shared.Dir {
						t.Errorf("%s lists the shared state folder %s", p.mnt, shared.Dir)
					}
				}
				if _, err := os.Stat(p.m(shared.Dir)); !errors.Is(err, fs.ErrNotExist) {
					t.Errorf("stat %s through the mount: %v, want ENOENT", shared.Dir, err)
				}
				if err := os.RemoveAll(p.m(shared.Dir + "/v1")); err != nil {
					t.Logf("rm -rf %s/v1 through the mount: %v", shared.Dir, err)
				}
			}

			// Pin through mount 1 with a reason: protected on 2 and 3 within one sync.
			pinned := time.Now()
			if out, code := cli(ps[0], "pin", "--why", "incident review", path.Dir(target)); code != 0 {
				t.Fatalf("pin: exit %d: %s", code, out)
			}
			if got := state(ps[0], target); got == "deletable" {
				t.Errorf("mount 1 finds %s deletable right after its own pin", target)
			}
			for i, p := range ps[1:] {
				deadline := pinned.Add(2*interval + 5*time.Second) // one sync after the pin, however they are phased, plus the sync's own time
				// A pin shows as protected-by-policy (a transient "blocked" during a sync is no protection to wait for).
				for state(p, target) != "protected-by-policy" {
					if time.Now().After(deadline) {
						t.Fatalf("mount %d still finds %s %s %s after the pin on mount 1:\n%s", i+2, target, state(p, target), time.Since(pinned).Round(time.Millisecond), p.logText())
					}
					time.Sleep(20 * time.Millisecond)
				}
				t.Logf("pin on mount 1 → protected on mount %d after %s (sync interval %s): %s", i+2, time.Since(pinned).Round(time.Millisecond), interval, state(p, target))
			}
			deadline := pinned.Add(2*interval + 5*time.Second)
			for state(obs, target) != "protected-by-policy" {
				if time.Now().After(deadline) {
					t.Fatalf("the read-only observer finds %s %s %s after the pin", target, state(obs, target), time.Since(pinned).Round(time.Millisecond))
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := os.Remove(obs.m(target)); !errors.Is(err, syscall.EPERM) {
				t.Errorf("rm %s on the observer: %v, want EPERM", target, err)
			}
			if out, code := cli(obs, "pin", path.Dir(metas[0])); code == 0 || !strings.Contains(out, "--shared-read-only") {
				t.Errorf("pin through the read-only observer: exit %d, want a refusal naming --shared-read-only: %s", code, out)
			}
			for i, p := range ps[1:] {
				if err := os.Remove(p.m(target)); !errors.Is(err, syscall.EPERM) {
					recs := p.auditRecords()
					t.Errorf("rm %s on mount %d: %v, want EPERM (pinned on mount 1); last audit record %+v", target, i+2, err, recs[len(recs)-1])
				}
			}

			// The fleet, seen from the store: three mounts, the pin with its reason.
			out, code := mntRun(t, "", mntBinary(t), append([]string{"fleet", "--store", store, "--json"}, flags...)...)
			if code != 0 {
				t.Fatalf("fleet: exit %d: %s", code, out)
			}
			var fl struct {
				Mounts []struct {
					Index string `json:"index"`
					State string `json:"state"`
				} `json:"mounts"`
				Pins []shared.Pin `json:"pins"`
			}
			if err := json.Unmarshal([]byte(out), &fl); err != nil {
				t.Fatalf("fleet --json: %v: %s", err, out)
			}
			seen := map[string]string{}
			for _, m := range fl.Mounts {
				seen[m.Index] = m.State
			}
			if _, listed := seen[obs.index]; listed {
				t.Errorf("fleet lists the read-only observer, which writes nothing: %s", out)
			}
			for i, p := range ps {
				if st := seen[p.index]; st != "ok" {
					t.Errorf("fleet: mount %d (%s) is %q, want ok: %s", i+1, p.index, st, out)
				}
			}
			if len(fl.Pins) != 1 || fl.Pins[0].Key != target || !fl.Pins[0].Pinned || fl.Pins[0].Why != "incident review" || fl.Pins[0].By == "" {
				t.Errorf("fleet pins = %+v, want %s pinned with its reason and who", fl.Pins, target)
			}
			if out, _ := mntRun(t, "", mntBinary(t), append([]string{"fleet", "--store", store}, flags...)...); !strings.Contains(out, "incident review") {
				t.Errorf("fleet does not show the pin's reason:\n%s", out)
			}

			// Unpin through the last mount: released on the others within one sync.
			unpinned := time.Now()
			last := len(ps) - 1
			if out, code := cli(ps[last], "unpin", path.Dir(target)); code != 0 {
				t.Fatalf("unpin: exit %d: %s", code, out)
			}
			for i, p := range ps[:last] {
				deadline := unpinned.Add(2*interval + 5*time.Second)
				for state(p, target) != "deletable" {
					if time.Now().After(deadline) {
						t.Fatalf("mount %d still protects %s %s after the unpin on mount %d", i+1, target, time.Since(unpinned).Round(time.Millisecond), last+1)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			for state(obs, target) != "deletable" {
				if time.Since(unpinned) > 2*interval+5*time.Second {
					t.Fatalf("the observer still protects %s after the unpin", target)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if err := os.Remove(ps[0].m(target)); err != nil {
				t.Errorf("rm %s on mount 1 after the unpin: %v", target, err)
			}
			for _, p := range ps {
				p.stop()
			}
			obs.stop()
		})
	}
}
