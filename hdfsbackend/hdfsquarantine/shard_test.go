package hdfsquarantine_test

import (
	"context"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// A local user can create and delete files through the mount as fast as the NameNode serves them:
// in one flat folder the stagings would reach the NameNode's item limit per directory
// (dfs.namenode.fs-limits.max-directory-items), and every deletion would then fail. Stagings go
// into a folder per minute of deletion time instead: with the limit at 40 and 30 stagings a minute,
// 300 stagings all succeed, every one is listed, restored or purged, and Tidy removes the folders
// they leave empty.
func TestShardsKeepEveryFolderBelowTheItemLimit(t *testing.T) {
	ctx := context.Background()
	const n, limit = 300, 40
	files := map[string]string{}
	for i := range n {
		files[fmt.Sprintf("job/chk-%d/f", i)] = fmt.Sprint(i)
	}
	f := newStore(t, files)
	f.MaxItems = limit
	clock := time.Date(2026, 12, 2, 3, 50, 0, 0, time.UTC) // across an hour's end
	a := open(t, f, func() time.Time { return clock })
	d := quarantine.Decision{Op: "unlink", Reason: "allowed"}
	for i := range n {
		if _, err := a.Stage(ctx, fmt.Sprintf("job/chk-%d/f", i), d); err != nil {
			t.Fatalf("staging %d: %v", i, err)
		}
		clock = clock.Add(2 * time.Second)
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != n || len(probs) != 0 {
		t.Fatalf("ListAll = %d entries, %+v, %v; want %d entries", len(es), probs, err, n)
	}
	for i, e := range es[:10] {
		if _, err := a.Restore(ctx, e.ID); err != nil {
			t.Fatalf("restore %d: %v", i, err)
		}
		exactlyOnce(t, f, a, e.Key(), files[e.Key()])
	}
	clock = clock.Add(time.Hour)
	if r, err := quarantine.PurgeExpired(ctx, a, nil, time.Minute, clock, nil); err != nil || len(r.Purged) != n-10 {
		t.Fatalf("purge = %d purged, %v", len(r.Purged), err)
	}
	if err := a.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := f.List(ctx, a.Dir(), func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			left = append(left, fi.Name)
		}
		return nil
	}); err != nil || len(left) != 0 {
		t.Errorf("left in the area after purging everything and tidying: %v %v", left, err)
	}
}

// Entries staged into the flat area of a version before the shard folders are still listed, found,
// restored and purged, and their leftover records tidied, beside new ones in shard folders.
func TestFlatEntriesOfOlderVersions(t *testing.T) {
	ctx := context.Background()
	f := newStore(t, map[string]string{"job/new": "new"})
	clock := mtime.Add(time.Hour)
	a := open(t, f, func() time.Time { return clock })
	staged := mtime.Add(-time.Hour)
	id := quarantine.NewID(staged)
	flat := map[string]string{
		// self-describing, restored
		id + "~unlink~1000~0~0~~" + b64("job/old"): "old",
		// self-describing, purged
		quarantine.NewID(staged) + "~unlink~1000~0~0~~" + b64("job/purged"): "purged",
	}
	// a long path with its record, restored
	longID := quarantine.NewID(staged)
	long := "job/" + strings.Repeat("l", 250)
	rec, err := json.Marshal(quarantine.Entry{ID: longID, Path: long, DeletedAt: staged, Decision: quarantine.Decision{Op: "unlink", Reason: "allowed"}})
	if err != nil {
		t.Fatal(err)
	}
	flat[longID] = "long"
	flat[longID+".json"] = string(rec)
	// a record left without its file
	leftover := quarantine.NewID(staged)
	flat[leftover+".json"] = `{"id":"` + leftover + `"}`
	for name, body := range flat {
		if err := f.Put(a.Dir()+"/"+name, []byte(body), mtime); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := a.Stage(ctx, "job/new", quarantine.Decision{Op: "unlink", Reason: "allowed"}); err != nil {
		t.Fatal(err)
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 4 || len(probs) != 0 {
		t.Fatalf("ListAll = %+v %+v %v; want the three flat entries and the new one", es, probs, err)
	}
	byKey := map[string]quarantine.Entry{}
	for _, e := range es {
		byKey[e.Key()] = e
	}
	if e, ok, err := quarantine.Find(ctx, a, long); err != nil || !ok || e.ID != longID {
		t.Fatalf("Find(long) = %+v %v %v", e, ok, err)
	}
	for _, k := range []string{"job/old", long, "job/new"} {
		if _, err := a.Restore(ctx, byKey[k].ID); err != nil {
			t.Fatalf("restore %s: %v", k, err)
		}
	}
	for k, want := range map[string]string{"job/old": "old", long: "long", "job/new": "new"} {
		if b, err := f.ReadFile(root + "/" + k); err != nil || string(b) != want {
			t.Errorf("restored %s holds %q %v, want %q", k, b, err, want)
		}
	}
	if err := a.Purge(ctx, byKey["job/purged"].ID); err != nil {
		t.Fatal(err)
	}
	if err := a.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if left := filesBelow(f, a.Dir()); len(left) != 0 {
		t.Errorf("left in the area: %v", left)
	}
}

// ownerOf reports owner for the folders (listed or stat'ed) whose name is one of names.
type ownerOf struct {
	*hdfsfake.FS
	names map[string]bool
	owner string
}

func (o ownerOf) fix(fi hdfsclient.FileInfo) hdfsclient.FileInfo {
	if fi.IsDir && o.names[fi.Name] {
		fi.Owner = o.owner
	}
	return fi
}

func (o ownerOf) Stat(ctx context.Context, name string) (hdfsclient.FileInfo, error) {
	fi, err := o.FS.Stat(ctx, name)
	return o.fix(fi), err
}

func (o ownerOf) List(ctx context.Context, name string, fn func([]hdfsclient.FileInfo) error) error {
	return o.FS.List(ctx, name, func(page []hdfsclient.FileInfo) error {
		for i := range page {
			page[i] = o.fix(page[i])
		}
		return fn(page)
	})
}

// A shard folder that is not the area's own (another owner, or writable by others: the NameNode
// checks no permissions, or the superuser gave it away) is used at no level: a staging into it is
// refused with nothing deleted, what it holds is a problem (never listed as an entry, restored or
// purged), and Tidy leaves it.
func TestShardFoldersOfSomeoneElse(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 12, 2, 3, 7, 30, 0, time.UTC)
	planted := quarantine.NewID(clock) + "~unlink~0~0~0~~" + b64("job/planted")
	for _, tc := range []struct {
		name  string
		mode  [2]uint32 // of the hour and the minute folder
		owner string    // of the folder named by ownedBy
		of    string
	}{
		{name: "hour folder writable by others", mode: [2]uint32{0o777, 0o700}},
		{name: "minute folder writable by the group", mode: [2]uint32{0o700, 0o770}},
		{name: "hour folder of another owner", mode: [2]uint32{0o700, 0o700}, owner: "mallory", of: "2026120203"},
		{name: "minute folder of another owner", mode: [2]uint32{0o700, 0o700}, owner: "mallory", of: "07"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newStore(t, map[string]string{"job/a": "a"})
			var fsys hdfsclient.FS = f
			if tc.owner != "" {
				fsys = ownerOf{FS: f, names: map[string]bool{tc.of: true}, owner: tc.owner}
			}
			a, err := hdfsquarantine.Open(ctx, fsys, root, func() time.Time { return clock })
			if err != nil {
				t.Fatal(err)
			}
			hour, minute := a.Dir()+"/2026120203", a.Dir()+"/2026120203/07"
			if err := f.Mkdir(ctx, hour, fsMode(tc.mode[0])); err != nil {
				t.Fatal(err)
			}
			if err := f.Mkdir(ctx, minute, fsMode(tc.mode[1])); err != nil {
				t.Fatal(err)
			}
			if err := f.Put(minute+"/"+planted, []byte("evil"), mtime); err != nil {
				t.Fatal(err)
			}
			if e, err := a.Stage(ctx, "job/a", quarantine.Decision{Op: "unlink", Reason: "allowed"}); err == nil || !strings.Contains(err.Error(), "nothing was deleted") {
				t.Fatalf("Stage into the folder = %+v %v, want a refusal", e, err)
			}
			if b, err := f.ReadFile(root + "/job/a"); err != nil || string(b) != "a" {
				t.Fatalf("job/a after the refused staging: %q %v", b, err)
			}
			es, probs, err := a.ListAll(ctx)
			if err != nil || len(es) != 0 || len(probs) != 1 {
				t.Fatalf("ListAll = %+v %+v %v; want the folder as the one problem", es, probs, err)
			}
			if _, err := a.Restore(ctx, planted); err == nil {
				t.Error("restored an entry from the folder")
			}
			if err := a.Purge(ctx, planted); err == nil {
				t.Error("purged an entry from the folder")
			}
			if err := a.Tidy(ctx, 0); err != nil {
				t.Fatal(err)
			}
			if _, err := f.Stat(ctx, path.Join(minute, planted)); err != nil {
				t.Errorf("the planted file is gone: %v", err)
			}
			if _, err := f.Stat(ctx, root+"/job/planted"); err == nil {
				t.Error("the planted file reached the store")
			}
		})
	}
}

// A shard folder that changes hands after a staging checked it (the superuser's chown) is refused
// by the next restore or purge of what it holds, as by the next listing: a lookup checks the folders
// every time.
func TestShardFolderGivenAwayAfterStaging(t *testing.T) {
	ctx := context.Background()
	clock := time.Date(2026, 12, 2, 3, 7, 30, 0, time.UTC)
	f := newStore(t, map[string]string{"job/a": "a"})
	o := ownerOf{FS: f, names: map[string]bool{}, owner: "mallory"}
	a, err := hdfsquarantine.Open(ctx, o, root, func() time.Time { return clock })
	if err != nil {
		t.Fatal(err)
	}
	e, err := a.Stage(ctx, "job/a", quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	o.names["07"] = true
	if _, err := a.Restore(ctx, e.ID); err == nil || !strings.Contains(err.Error(), "owned by mallory") {
		t.Errorf("Restore from the folder given away = %v, want a refusal", err)
	}
	if err := a.Purge(ctx, e.ID); err == nil {
		t.Error("purged from the folder given away")
	}
	if es, probs, err := a.ListAll(ctx); err != nil || len(es) != 0 || len(probs) != 1 {
		t.Errorf("ListAll = %+v %+v %v; want the folder as the one problem", es, probs, err)
	}
	if b, err := f.ReadFile(a.EntryPath(e.ID)); err != nil || string(b) != "a" {
		t.Errorf("the staged file: %q %v", b, err)
	}
}
