package s3mount_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// TestRedteamListAheadStormBounded: a readdir storm (any user who can list the mount: ls in a loop over
// folders of many subfolders) makes the list-ahead list at most its bound of held first pages beyond
// what the readdirs list themselves, however many readdirs ask and however many subfolders they show:
// the daemon neither floods the server nor holds more pages. Pages are kept a minute here, so none is
// discarded and listed again: the bound is the held pages' (64), not a rate.
func TestRedteamListAheadStormBounded(t *testing.T) {
	e, p := setupProxied(t, func(o *s3mount.Options) { s3mount.ListAheadTTL(o, time.Minute) })
	const folders, subs = 4, 40 // 160 subfolders, more than the 64 held pages
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for f := range folders {
		for s := range subs {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				e.put(t, fmt.Sprintf("storm/d%d/s%02d/f", f, s), "x")
			}()
		}
	}
	wg.Wait()
	before := p.Ops()["ListObjectsV2"]
	const rounds = 10
	readdirs := 0
	for range rounds {
		for f := range folders {
			ents, err := os.ReadDir(filepath.Join(e.mnt, fmt.Sprintf("storm/d%d", f)))
			if err != nil || len(ents) != subs {
				t.Fatalf("readdir storm/d%d: %d entries, %v", f, len(ents), err)
			}
			readdirs++
		}
	}
	// Let the listings started ahead finish (at most 8 at once), so all of them are counted.
	deadline := time.Now().Add(time.Minute)
	for held := 0; time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		held = 0
		for f := range folders {
			for s := range subs {
				if e.m.ListedAheadDone(fmt.Sprintf("storm/d%d/s%02d", f, s)) {
					held++
				}
			}
		}
		if held >= 64 {
			break
		}
	}
	lists := p.Ops()["ListObjectsV2"] - before
	// Each readdir of a folder of 40 names is one page, and each may come with a lookup of its folder
	// (a one-key listing; the kernel keeps an entry 1 s), plus storm's; the pages listed ahead are at
	// most 64 (held). Without the bound the storm would list each of the 160 subfolders, per readdir.
	if max := int64(2*readdirs + 1 + 64); lists > max {
		t.Errorf("%d readdirs of folders showing %d subfolders each sent %d listings, want at most %d (a page and a lookup each, plus 64 held pages)",
			readdirs, subs, lists, max)
	}
	t.Logf("%d readdirs: %d listings", readdirs, lists)
}

// TestRedteamListAheadNeverListsTheArea: a readdir of the mount's root, where the quarantine area's
// prefix is listed as a subfolder, never lists the area ahead: what no opendir can reach is never
// fetched (its names, other users' deletions, are never in the daemon's memory as a listing).
func TestRedteamListAheadNeverListsTheArea(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { s3mount.ListAheadTTL(o, time.Minute) })
	e.put(t, store.QuarantineDir+"/some-entry", "staged")
	e.put(t, store.QuarantineDir+"/sub/entry", "staged")
	e.put(t, "job/chk-1/f", "x")
	ents, err := os.ReadDir(e.mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, en := range ents {
		if en.Name() == store.QuarantineDir {
			t.Errorf("the area is listed in the root")
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for !e.m.ListedAheadDone("job") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !e.m.ListedAheadDone("job") {
		t.Fatal("job was not listed ahead: the test shows nothing")
	}
	for _, k := range []string{store.QuarantineDir, store.QuarantineDir + "/sub"} {
		if e.m.ListedAheadDone(k) {
			t.Errorf("%s was listed ahead", k)
		}
	}
}
