//go:build hdfs

package hdfsguardd_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
)

// TestTrashOnHDFS: on a real NameNode with fs.trash.interval > 0, rm -rf of the old job through the
// mount leaves the files the guard must keep and moves every file it lets go into the user's
// .Trash/Current at its full path (as `hdfs dfs -rm` would), so an allowed deletion stays
// recoverable until the NameNode's trash emptier runs; nothing is both in place and in the trash.
func TestTrashOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{TrashInterval: time.Hour})
	tr, uri := incident(t, c)
	storeDir := c.Root() + "/store"
	before := hdfsFiles(t, uri)
	dir := t.TempDir()
	mnt, stop := guardMount(t, dir, guardd.Config{StoreDir: uri, Policy: refindex.DefaultPolicy()}, opts)
	_ = exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).Run()
	stop()
	left := hdfsFiles(t, uri)
	after := map[string]bool{}
	for _, k := range left {
		after[k] = true
	}
	checkSurvivors(t, tr, left)
	// The trash: /user/<user>/.Trash/Current<absolute path>, whoever the client's user is.
	trashed := map[string]bool{}
	marker := ".Trash/Current" + storeDir + "/"
	for _, k := range hdfsFiles(t, c.URI("/user")) {
		if i := strings.Index(k, marker); i >= 0 {
			trashed[k[i+len(marker):]] = true
		}
	}
	gone := 0
	for _, k := range before {
		switch {
		case after[k] && trashed[k]:
			t.Errorf("%s both in place and in the trash", k)
		case !after[k] && !trashed[k]:
			t.Errorf("%s deleted, not in the trash", k)
		case !after[k]:
			gone++
		}
	}
	if gone == 0 || len(trashed) != gone {
		t.Errorf("%d files gone, %d in the trash", gone, len(trashed))
	}
	verifyOK(t, uri, dir, true)
}
