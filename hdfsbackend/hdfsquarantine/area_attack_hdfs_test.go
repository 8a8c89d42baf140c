//go:build hdfs

package hdfsquarantine_test

import (
	"context"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsquarantine"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// On a real NameNode: a user who can write the store root renames the daemon's quarantine folder away
// while it is open and makes their own in its place. The next staging goes to the daemon's folder
// (addressed by its inode), never to theirs; a folder that user made before Open is refused.
func TestFolderSwapOnHDFS(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{})
	root := c.Root() + "/store"
	cl, _ := c.DialSuperuser(t, root)
	must := func(_ string, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(c.DFS(t, "-mkdir", "-p", root+"/job"))
	must(c.DFS(t, "-chmod", "777", root))
	minidfs.WriteFile(t, cl, root+"/job/a", "alpha")

	// made by another user before the first Open: refused
	area := root + "/" + store.QuarantineDir
	must(c.DFSAs(t, "mallory", "-mkdir", area))
	if _, err := hdfsquarantine.Open(ctx, cl, root, nil); err == nil || !strings.Contains(err.Error(), "owned by mallory") {
		t.Fatalf("Open of mallory's folder = %v, want a refusal", err)
	}
	must(c.DFS(t, "-rm", "-r", area))

	a, err := hdfsquarantine.Open(ctx, cl, root, nil)
	if err != nil {
		t.Fatal(err)
	}
	must(c.DFSAs(t, "mallory", "-mv", area, root+"/moved-away"))
	must(c.DFSAs(t, "mallory", "-mkdir", area))
	must(c.DFSAs(t, "mallory", "-chmod", "777", area))
	e, err := a.Stage(ctx, "job/a", quarantine.Decision{Op: "unlink", Reason: "allowed", UID: 1000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Stat(ctx, area+"/"+hdfsquarantine.EntryRel(e.ID)); err == nil {
		t.Fatalf("staged into mallory's folder: %s", area+"/"+hdfsquarantine.EntryRel(e.ID))
	}
	if _, err := cl.Stat(ctx, root+"/moved-away/"+hdfsquarantine.EntryRel(e.ID)); err != nil {
		t.Fatalf("not staged into the daemon's folder: %v", err)
	}
	es, err := a.List(ctx)
	if err != nil || len(es) != 1 || es[0].Key() != "job/a" {
		t.Fatalf("List = %+v %v", es, err)
	}
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if fi, err := cl.Stat(ctx, root+"/job/a"); err != nil || fi.Size != 5 {
		t.Fatalf("restored job/a: %+v %v", fi, err)
	}

	// A path too long for a name: its record is written and read back through the inode path too,
	// and a purge removes the file and its record from the daemon's folder.
	long := "job/" + strings.Repeat("l", 200)
	minidfs.WriteFile(t, cl, root+"/"+long, "")
	e, err = a.Stage(ctx, long, quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Stat(ctx, root+"/moved-away/"+hdfsquarantine.EntryRel(e.ID)+".json"); err != nil {
		t.Fatalf("no record in the daemon's folder: %v", err)
	}
	if es, err := a.List(ctx); err != nil || len(es) != 1 || es[0].Key() != long {
		t.Fatalf("List = %+v %v", es, err)
	}
	if err := a.Purge(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	var left []string
	var walk func(dir string)
	walk = func(dir string) {
		if err := cl.List(ctx, dir, func(page []hdfsclient.FileInfo) error {
			for _, fi := range page {
				if fi.IsDir {
					walk(dir + "/" + fi.Name)
				} else {
					left = append(left, dir+"/"+fi.Name)
				}
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	walk(root + "/moved-away")
	if len(left) != 0 {
		t.Fatalf("files left in the daemon's folder after the purge: %v", left)
	}
}
