//go:build hdfs

package hdfsquarantine_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// On a real NameNode: stagings go into the shard folder of their minute (made below the area folder's
// inode path, mode 0700), beside an entry of the flat layout of older versions; every one is listed,
// restored or purged, Tidy removes the emptied folders, and a shard folder given to another user (by
// the superuser) is refused at every use.
func TestShardsOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	root := c.Root() + "/store"
	cl, _ := c.DialSuperuser(t, root)
	put := func(p, data string) { minidfs.WriteFile(t, cl, p, data) }
	long := "job/" + strings.Repeat("l", 240)
	for _, k := range []string{"job/a", "job/b", long, "job/c", "job/d"} {
		put(root+"/"+k, k)
	}
	clock := time.Date(2026, 12, 2, 3, 59, 58, 0, time.UTC)
	now := func() time.Time { return clock }
	a, err := hdfsquarantine.Open(ctx, cl, root, now)
	if err != nil {
		t.Fatal(err)
	}
	area := root + "/" + store.QuarantineDir
	old := quarantine.NewID(clock.Add(-24*time.Hour)) + "~unlink~0~0~0~~" + b64("job/old")
	put(area+"/"+old, "job/old")

	d := quarantine.Decision{Op: "unlink", Reason: "allowed"}
	ids := map[string]string{}
	for _, k := range []string{"job/a", "job/b", long} {
		e, err := a.Stage(ctx, k, d)
		if err != nil {
			t.Fatal(err)
		}
		ids[k] = e.ID
		clock = clock.Add(2 * time.Second) // job/b and the long one in the next hour
	}
	for k, id := range ids {
		fi, err := cl.Stat(ctx, area+"/"+hdfsquarantine.EntryRel(id))
		if err != nil || fi.Size != int64(len(k)) {
			t.Errorf("%s not in its shard folder %s: %+v %v", k, hdfsquarantine.EntryRel(id), fi, err)
		}
	}
	for _, dir := range []string{"2026120203", "2026120203/59", "2026120204/00"} {
		if fi, err := cl.Stat(ctx, area+"/"+dir); err != nil || !fi.IsDir || fi.Mode.Perm() != 0o700 {
			t.Errorf("shard folder %s: %+v %v, want a directory of mode 0700", dir, fi, err)
		}
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(es) != 4 || len(probs) != 0 {
		t.Fatalf("ListAll = %+v %+v %v; want three staged entries and the flat one", es, probs, err)
	}
	for _, id := range []string{old, ids["job/a"]} {
		if _, err := a.Restore(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	clock = clock.Add(2 * time.Hour) // both hours ended more than Tidy's 10 minutes ago
	if r, err := quarantine.PurgeExpired(ctx, a, nil, time.Minute, clock, nil); err != nil || len(r.Purged) != 2 {
		t.Fatalf("purge = %+v %v", r, err)
	}
	if err := a.Tidy(ctx, 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	var left []string
	if err := cl.List(ctx, area, func(page []hdfsclient.FileInfo) error {
		for _, fi := range page {
			left = append(left, fi.Name)
		}
		return nil
	}); err != nil || len(left) != 0 {
		t.Fatalf("left in the area after restoring and purging everything: %v %v", left, err)
	}
	for _, k := range []string{"job/a", "job/old"} {
		if fi, err := cl.Stat(ctx, root+"/"+k); err != nil || fi.Size != int64(len(k)) {
			t.Errorf("restored %s: %+v %v", k, fi, err)
		}
	}

	// A shard folder the superuser gave to mallory: its entry is a problem, never restored, and a
	// staging into it (by a new mount, which has not checked the folder yet) is refused.
	e, err := a.Stage(ctx, "job/c", d)
	if err != nil {
		t.Fatal(err)
	}
	hour := area + "/" + strings.SplitN(hdfsquarantine.EntryRel(e.ID), "/", 2)[0]
	if _, err := c.DFS(t, "-chown", "mallory", hour); err != nil {
		t.Fatal(err)
	}
	if es, probs, err := a.ListAll(ctx); err != nil || len(es) != 0 || len(probs) != 1 {
		t.Fatalf("ListAll with mallory's hour folder = %+v %+v %v; want it as the one problem", es, probs, err)
	}
	if _, err := a.Restore(ctx, e.ID); err == nil {
		t.Error("restored an entry from mallory's folder")
	}
	b, err := hdfsquarantine.Open(ctx, cl, root, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Stage(ctx, "job/d", d); err == nil || !strings.Contains(err.Error(), "owned by mallory") {
		t.Fatalf("staging into mallory's folder = %v, want a refusal", err)
	}
	if fi, err := cl.Stat(ctx, root+"/job/d"); err != nil || fi.Size != int64(len("job/d")) {
		t.Errorf("job/d after the refused staging: %+v %v", fi, err)
	}
}
