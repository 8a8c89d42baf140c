package s3guardd_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/control"
	"github.com/ckguard/ckguard/fs/guardd"
	"github.com/ckguard/ckguard/fs/guardd/guarddtest"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3guardd"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestS3QuarantinePurgeKeepsReferenced: on a versitygw bucket, rm -rf of the live job through a mount
// with a wrong policy (no grace, no active window) stages every object it lets go; once a staged
// _metadata is restored its checkpoint is live again (each entry records the rm that deleted it), and past the TTL the background purge and an
// explicit purge take everything else but never an entry that checkpoint references.
func TestS3QuarantinePurgeKeepsReferenced(t *testing.T) {
	s3server.RequireFUSE(t)
	srv := s3server.Start(t)
	const bucket, prefix = "ckpt", "flink"
	srv.Bucket(t, bucket)
	root := "s3://" + bucket + "/" + prefix
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "tree"), time.Now(), treegen.Options{URIPrefix: root})
	if err != nil {
		t.Fatal(err)
	}
	s3server.AWS(t, srv.Endpoint, "s3", "cp", "--recursive", "--only-show-errors", tr.Root, root+"/")
	for k, f := range tr.Files { // the posix backend keeps the files' mtimes as Last-Modified
		if err := os.Chtimes(filepath.Join(srv.DataDir, bucket, prefix, filepath.FromSlash(k)), f.ModTime, f.ModTime); err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: bucket, Prefix: prefix + "/"})
	if err != nil {
		t.Fatal(err)
	}
	objects := func() map[string]bool {
		out := map[string]bool{}
		if err := c.Walk(ctx, "", func(o s3client.Object) error {
			if !o.IsDir && !store.InQuarantine(o.Key) {
				out[o.Key] = true
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}

	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	clk := guarddtest.NewClock(time.Now())
	pol := guarddtest.ReferencesOnly()
	var ctlSock string
	guarddtest.Start(t, guardd.Config{StoreDir: root, IndexDir: filepath.Join(dir, "index"), Mountpoint: mnt,
		Policy: pol, SyncInterval: 100 * time.Millisecond, Quarantine: 24 * time.Hour, QuarantineNow: clk.Now,
		Ready: func(m *guardd.Mounted) { ctlSock = m.ControlSocket }},
		func(ctx context.Context, cfg guardd.Config) error {
			return s3guardd.Run(ctx, cfg, srv.Config(), func(o *s3mount.Options) { o.SpoolDir = filepath.Join(dir, "spool") })
		})
	job := "flink-checkpoints/" + treegen.IncidentOneNewJob
	before := objects()
	if out, err := exec.Command("rm", "-rf", filepath.Join(mnt, job)).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf %s through the mount: %v\n%s", job, err, out)
	}
	q, err := control.DialQuarantine(guardd.QuarantineSocket(ctlSock))
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	// Deletions are acknowledged into the delete queue and staged in its rounds: wait until every
	// object gone from its key is staged.
	var l *quarantine.ListResult
	var gone int
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if l, err = q.List(ctx); err != nil {
			t.Fatal(err)
		}
		gone = len(before) - len(objects())
		if (gone > 0 && len(l.Entries) == gone) || time.Now().After(deadline) {
			break
		}
	}
	if gone == 0 || len(l.Entries) != gone {
		t.Fatalf("%d entries in quarantine for %d objects gone", len(l.Entries), gone)
	}
	// Every entry names who deleted it, as the local mount's do: the queued deletions (data files, staged
	// in a later round of the delete queue) and the synchronous ones (each _metadata) alike.
	for _, e := range l.Entries {
		if d := e.Decision; d.Op != quarantine.OpUnlink || d.Comm != "rm" || d.PID == 0 || d.UID != uint32(os.Getuid()) {
			t.Errorf("entry %s records %+v; want an unlink by rm (pid set, uid %d)", e.Path, d, os.Getuid())
		}
	}

	// Young entries are never purged.
	r, err := q.Purge(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || len(r.Kept) != gone || r.Kept[0].Reason != "young" {
		t.Fatalf("purge before the TTL: %+v", r)
	}

	// Restoring one checkpoint's _metadata makes it live at once: its staged files are referenced again.
	meta, referenced := guarddtest.RestoreMetadataLive(t, ctx, q, ctlSock, l.Entries, "/chk-100274/_metadata")

	// Past the TTL the background purge takes everything else, never what the restored checkpoint
	// references.
	clk.Add(25 * time.Hour)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if l, err = q.List(ctx); err != nil {
			t.Fatal(err)
		}
		if len(l.Entries) <= len(referenced) || time.Now().After(deadline) {
			break
		}
	}
	if len(l.Entries) != len(referenced) {
		t.Fatalf("after the TTL %d entries left, want the %d the restored checkpoint references", len(l.Entries), len(referenced))
	}
	for _, e := range l.Entries {
		if !referenced[e.Path] {
			t.Errorf("%s left in quarantine past the TTL, unreferenced", e.Path)
		}
	}
	r, err = q.Purge(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Purged) != 0 || len(r.Kept) != len(referenced) {
		t.Fatalf("purge of referenced entries: %+v", r)
	}
	for _, k := range r.Kept {
		if k.Reason != "referenced" {
			t.Errorf("%s kept as %q, want referenced", k.Entry.Path, k.Reason)
		}
	}
	// The kept entries still restore, and the checkpoint is whole again.
	var ids []string
	for _, e := range l.Entries {
		ids = append(ids, e.ID)
	}
	if rr, err := q.Restore(ctx, ids); err != nil || len(rr.Restored) != len(ids) {
		t.Fatalf("restore of the kept entries: %+v %v", rr, err)
	}
	if b := guarddtest.Broken(t, ctx, ctlSock, meta.Path); b != nil {
		t.Errorf("%s broken after its files came back: %+v", meta.Path, b)
	}
}
