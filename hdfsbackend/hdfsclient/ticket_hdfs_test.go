//go:build hdfs

package hdfsclient_test

import (
	"context"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/hdfsbackend/hdfscli"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfstest/minidfs"
)

// TestTicketCacheReload: on a Kerberos cluster, a ticket-cache login rereads a renewed cache (a new
// kinit into the same file) and makes its NameNode connections from it: calls work after the swap, a
// file opened for writing before it completes on its own connection, and a cache rewritten for another
// principal is refused.
func TestTicketCacheReload(t *testing.T) {
	ctx := context.Background()
	c := minidfs.Start(t, minidfs.Options{Kerberos: true})
	k := c.Kerberos()
	k.Setenv(t)
	cc := filepath.Join(t.TempDir(), "krb5cc")
	k.Kinit(t, minidfs.User, cc)
	t.Setenv("KRB5CCNAME", "FILE:"+cc)
	cl, _, err := hdfscli.Dial(ctx, c.URI(c.Root()), hdfscli.Options{Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	r := c.Root()

	before, err := cl.Create(ctx, r+"/before", 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(before, "written across the reload"); err != nil {
		t.Fatal(err)
	}

	time.Sleep(1100 * time.Millisecond) // the new ticket ends at least a second later
	k.Kinit(t, minidfs.User, cc)
	if swapped, err := hdfsclient.ReloadTicketCache(cl, cc); err != nil || !swapped {
		t.Fatalf("reload of the renewed cache: swapped %v, %v", swapped, err)
	}
	if err := before.Close(); err != nil {
		t.Fatalf("close of a file opened before the reload: %v", err)
	}
	minidfs.WriteFile(t, cl, r+"/after", "after")
	if err := cl.Rename(ctx, r+"/after", r+"/before"); hdfsclient.Errno(err) == 0 {
		t.Errorf("rename onto an existing file after the reload: %v", err)
	}
	for p, want := range map[string]string{"/before": "written across the reload", "/after": "after"} {
		if got, err := readFile(cl, r+p); err != nil || got != want {
			t.Errorf("%s = %q, %v; want %q", p, got, err, want)
		}
	}

	other := filepath.Join(t.TempDir(), "krb5cc-other")
	k.Kinit(t, minidfs.Other, other)
	if swapped, err := hdfsclient.ReloadTicketCache(cl, other); swapped || err == nil || !strings.Contains(err.Error(), k.Principal(minidfs.Other)) {
		t.Errorf("reload from another principal's cache: swapped %v, %v", swapped, err)
	}
	if _, err := cl.Stat(ctx, r+"/before"); err != nil {
		t.Errorf("stat after the refused reload: %v", err)
	}
}
