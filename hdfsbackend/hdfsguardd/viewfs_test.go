//go:build hdfs

package hdfsguardd_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestViewFSStoreOnHDFS: Flink configured with a viewfs:// checkpoint directory writes viewfs:// URIs
// into `_metadata`; the guard mounted with --store viewfs://prod/flink/checkpoints (HADOOP_CONF_DIR's
// mount table: /flink → a directory of the real HDFS, beside another link) resolves the store to that
// HDFS directory, and rm -rf of the old job through the mount leaves exactly the files the live
// checkpoints reference; verify is green with the references placed by the mount table, not inferred.
func TestViewFSStoreOnHDFS(t *testing.T) {
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	c := minidfs.Start(t, minidfs.Options{})
	conf := t.TempDir()
	coreSite := fmt.Sprintf(`<?xml version="1.0"?>
<configuration>
  <property><name>fs.viewfs.mounttable.prod.link./flink/</name><value>%s/</value></property>
  <property><name>fs.viewfs.mounttable.prod.link./user</name><value>%s</value></property>
  <property><name>fs.viewfs.mounttable.prod.homedir</name><value>/user</value></property>
</configuration>
`, c.URI(c.Root()+"/viewdata/flink"), c.URI(c.Root()+"/viewdata/user"))
	if err := os.WriteFile(filepath.Join(conf, "core-site.xml"), []byte(coreSite), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HADOOP_CONF_DIR", conf)
	const view = "viewfs://prod/flink/checkpoints"
	storeDir := c.Root() + "/viewdata/flink/checkpoints"
	tr, err := treegen.IncidentTwo(t.TempDir(), time.Now(), treegen.Options{URIPrefix: view})
	if err != nil {
		t.Fatal(err)
	}
	c.Upload(t, tr.Root, storeDir)
	uri := c.URI(storeDir)
	before := hdfsFiles(t, uri)
	if got := hdfsFiles(t, view); strings.Join(got, ",") != strings.Join(before, ",") {
		t.Fatalf("the viewfs store lists %d files, its hdfs:// directory %d", len(got), len(before))
	}
	dir := t.TempDir()
	mnt, stop := guardMount(t, dir, guardd.Config{StoreDir: view, Policy: refindex.DefaultPolicy()}, opts)
	cleanUntilStable(t, uri, func() { _ = exec.Command("rm", "-rf", filepath.Join(mnt, tr.Purge)).Run() })
	stop()
	after := hdfsFiles(t, uri)
	checkSurvivors(t, tr, after)
	if len(under(after, tr.Purge)) == len(under(before, tr.Purge)) {
		t.Errorf("the cleanup deleted nothing")
	}
	verifyMapped(t, view, dir, nil)
	verifyMapped(t, uri, filepath.Join(dir, "as-hdfs"), nil) // the hdfs:// store knows its viewfs name too
}
