package integration

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/internal/loopfs"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountFullDiskFreesItself (issue 29 part 6): a local store on a real, small filesystem (a
// loop-mounted 64 MiB ext4), mounted with --quarantine 24h and the default --quarantine-min-free
// (5 %). Deletions through the mount fill the quarantine (a staging is a rename: nothing is freed),
// then a write through the mount takes the filesystem to about 99 % full. Within a few syncs the
// sweeper purges the OLDEST quarantine entries, and only as many as bring the free space back over 5 %,
// long before their TTL, each audited (quarantine-purge-space) and logged; ckguard_store_free_bytes
// follows statfs; the "almost full" WARN is said once over two such episodes (the filesystem never gets
// back over 10 % in between); and a new checkpoint larger than what was free at the peak is written
// through the mount afterwards. Without the space bound (the code before it) the quarantine holds its
// 24 h and the checkpoint write fails with ENOSPC.
func TestMountFullDiskFreesItself(t *testing.T) {
	mntRequire(t)
	fsRoot := loopfs.Ext4(t, loopfs.Options{Size: 64 << 20, Prefix: "ckguard-ext4-fulldisk-"})
	base, err := os.MkdirTemp("", "ckguard-ext4-fulldisk-base-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	store := filepath.Join(fsRoot, "store")
	tr, err := treegen.IncidentOne(store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	addr := freePort(t)
	// --grace 0s: the files this test writes through the mount are deleted again at once.
	p := sharedMount(t, base, tr.Root, "--quarantine", "24h", "--grace", "0s", "--metrics-addr", addr)

	space := func() (size, free int64) {
		var st unix.Statfs_t
		if err := unix.Statfs(store, &st); err != nil {
			t.Fatal(err)
		}
		return int64(st.Blocks) * st.Bsize, int64(st.Bavail) * st.Bsize
	}
	size, _ := space()
	minFree := size * 5 / 100
	job := "flink-checkpoints/" + treegen.IncidentOneOldJob
	const entrySize = 2 << 20
	block := bytes.Repeat([]byte("ckguard full disk "), entrySize/18+1)[:entrySize]

	// 1. Ten 2 MiB files written and deleted through the mount, one at a time: ten quarantine entries,
	// oldest first in this order.
	var staged []string
	for i := range 10 {
		rel := fmt.Sprintf("%s/scratch/old-%02d", job, i)
		if err := os.MkdirAll(filepath.Dir(p.m(rel)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p.m(rel), block, 0o644); err != nil {
			t.Fatalf("write %s through the mount: %v", rel, err)
		}
		if out, code := mntRun(t, "", "rm", p.m(rel)); code != 0 {
			t.Fatalf("rm %s through the mount: exit %d\n%s", rel, code, out)
		}
		staged = append(staged, rel)
		time.Sleep(20 * time.Millisecond) // distinct staging times, whatever the clock's resolution
	}
	if n := len(qList(t, p)); n != len(staged) {
		t.Fatalf("%d quarantine entries after deleting %d files, want all staged", n, len(staged))
	}

	// fill writes one file through the mount that leaves about 1 % of the filesystem free.
	fill := func(name string) int64 {
		t.Helper()
		_, free := space()
		n := free - size/100
		if n <= 0 {
			t.Fatalf("only %d bytes free before filling: the quarantine should have been purged", free)
		}
		f, err := os.Create(p.m(job + "/" + name))
		if err != nil {
			t.Fatal(err)
		}
		chunk := make([]byte, 1<<20)
		for left := n; left > 0; left -= int64(len(chunk)) {
			if left < int64(len(chunk)) {
				chunk = chunk[:left]
			}
			if _, err := f.Write(chunk); err != nil {
				f.Close()
				t.Fatalf("filling %s through the mount (%d of %d bytes left): %v", name, left, n, err)
			}
		}
		if err := f.Close(); err != nil {
			t.Fatalf("close %s: %v", name, err)
		}
		_, after := space()
		t.Logf("filled %s: %d bytes; free %d of %d (%.1f %%)", name, n, after, size, 100*float64(after)/float64(size))
		return after
	}
	// waitFree waits (bounded) until the filesystem has its 5 % again.
	waitFree := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			if _, free := space(); free >= minFree {
				return
			}
			if time.Now().After(deadline) {
				_, free := space()
				t.Fatalf("%s: the store's filesystem is still at %d of %d bytes free after 60 s (want at least %d: --quarantine-min-free 5%%); quarantine: %d entries\n%s",
					what, free, size, minFree, len(qList(t, p)), p.logText())
			}
		}
	}

	peak := fill("ballast-1")
	waitFree("after the first fill")
	left := qList(t, p)
	purged := len(staged) - len(left)
	if purged < 1 || purged >= len(staged) {
		t.Fatalf("%d of %d quarantine entries purged, want the oldest few (enough for 5 %% free), not none and not all", purged, len(staged))
	}
	// Oldest first: what is left is exactly the newest entries.
	keys := map[string]bool{}
	for _, e := range left {
		keys[e.Key()] = true
	}
	for i, rel := range staged {
		if keys[rel] != (i >= purged) {
			t.Fatalf("entry %s (the %d. oldest) left in quarantine: %v; with %d purged, want the %d oldest gone and the rest kept", rel, i+1, keys[rel], purged, purged)
		}
	}

	// 2. The store frees itself: a new checkpoint larger than what was free at the peak is written.
	ckpt := job + "/chk-100300/state"
	big := bytes.Repeat([]byte{7}, int(peak)+1<<20)
	if err := os.MkdirAll(filepath.Dir(p.m(ckpt)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p.m(ckpt), big, 0o644); err != nil {
		t.Fatalf("a new checkpoint file of %d bytes after the purge (%d were free at the peak): %v", len(big), peak, err)
	}

	// 3. A second episode (Flink fills the disk again): more of the oldest entries go, and the warning
	// is not repeated (the filesystem never got back over 10 % free).
	fill("ballast-2")
	waitFree("after the second fill")
	if n := len(qList(t, p)); n >= len(left) {
		t.Fatalf("second fill: %d quarantine entries left of %d, want more of the oldest purged", n, len(left))
	}
	gone := len(staged) - len(qList(t, p))

	// Each early purge audited with its cause, and logged.
	audited := map[string]bool{}
	for _, r := range p.auditRecords() {
		if r.Op != "quarantine-purge" {
			continue
		}
		if r.Reason != "quarantine-purge-space" {
			t.Errorf("audit record of an early purge: reason %q, want quarantine-purge-space: %+v", r.Reason, r)
		}
		audited[r.Path] = true
	}
	for _, rel := range staged[:gone] {
		if !audited[rel] {
			t.Errorf("no audit record of the early purge of %s", rel)
		}
	}
	if len(audited) != gone {
		t.Errorf("%d purges audited, %d entries gone", len(audited), gone)
	}
	log := p.logText()
	if !strings.Contains(log, "over its space bound") {
		t.Errorf("the early purges are not logged:\n%s", log)
	}
	if n := strings.Count(log, "almost full"); n != 1 {
		t.Errorf("the low-space warning was said %d times over two episodes, want once:\n%s", n, log)
	}
	// ckguard_store_free_bytes is statfs's figure at the last sync (read before that sync's sweep, so it
	// shows the recovery one sync after it).
	var got, gotSize float64
	var ok, ok2 bool
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		text := mntHTTPGet(t, "http://"+addr+"/metrics")
		got, ok = metricValue(text, "ckguard_store_free_bytes")
		gotSize, ok2 = metricValue(text, "ckguard_store_size_bytes")
		if ok && got >= float64(minFree) {
			break
		}
	}
	_, free := space()
	if !ok || !ok2 || got < float64(minFree) || got > float64(free+4<<20) || gotSize != float64(size) {
		t.Errorf("ckguard_store_free_bytes %v (%v), ckguard_store_size_bytes %v (%v); statfs: %d free of %d", got, ok, gotSize, ok2, free, size)
	}
	t.Logf("size %d, min free %d, free at the peak %d; purged %d then %d of %d entries", size, minFree, peak, purged, gone-purged, len(staged))
}
