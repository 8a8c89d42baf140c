package s3mount_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/s3backend/deleteq"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

const dqCrashEnv = "CKGUARD_DQ_CRASH_CHILD"

// stuck never decides: the child's queue holds every deletion it acknowledges.
type stuck struct{}

func (stuck) Recheck(ctx context.Context, _ []deleteq.Entry, _ func([]deleteq.Verdict)) { <-ctx.Done() }

// TestDeleteQueueCrashChild is the mount process of TestDeleteQueueKill9: a queued mount whose queue never
// applies anything, until the parent SIGKILLs it.
func TestDeleteQueueCrashChild(t *testing.T) {
	if os.Getenv(dqCrashEnv) == "" {
		t.Skip("child process of TestDeleteQueueKill9")
	}
	cfg := s3client.Config{Endpoint: os.Getenv("CKGUARD_DQ_ENDPOINT"), Region: s3server.Region, PathStyle: true,
		AccessKey: s3server.AccessKey, SecretKey: s3server.SecretKey}
	c, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: newChecker()})
	if err != nil {
		t.Fatal(err)
	}
	o := s3mount.Options{Client: c, Mountpoint: os.Getenv("CKGUARD_DQ_MNT"), Enforcer: enf, SpoolDir: t.TempDir(),
		DeleteQueueDir: os.Getenv("CKGUARD_DQ_DIR")}
	s3mount.TuneQueue(&o, func(qo *deleteq.Options) { qo.Recheck = stuck{} })
	m, err := s3mount.Mount(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Println("ready")
	m.Wait()
}

// TestDeleteQueueKill9: a mount acknowledges 1,000 deletions (find -delete) and is killed with SIGKILL
// before applying any: they are all in the journal, all objects still in the bucket. The next mount on
// the same index directory applies every one, except the 10 that a checkpoint indexed meanwhile
// references: decided again at apply time, they are kept.
func TestDeleteQueueKill9(t *testing.T) {
	s3server.RequireFUSE(t)
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	ctx := context.Background()
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 1000
	for i := range n {
		if _, err := c.Put(ctx, fmt.Sprintf("job/shared/f%04d", i), strings.NewReader("x"), 1, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir, mnt := t.TempDir(), t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDeleteQueueCrashChild$", "-test.v")
	cmd.Env = append(os.Environ(), dqCrashEnv+"=1", "CKGUARD_DQ_ENDPOINT="+srv.Endpoint, "CKGUARD_DQ_MNT="+mnt, "CKGUARD_DQ_DIR="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = exec.Command("fusermount3", "-uz", mnt).Run() })
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "ready" {
				ready <- true
			}
		}
		close(ready)
	}()
	if !<-ready {
		t.Fatal("the child mount did not start")
	}
	if b, err := exec.Command("find", mnt+"/job/shared", "-type", "f", "-delete").CombinedOutput(); err != nil {
		t.Fatalf("find -delete: %v\n%s", err, b)
	}
	if left, err := os.ReadDir(mnt + "/job/shared"); err != nil || len(left) != 0 {
		t.Fatalf("after find -delete the mount shows %d entries (%v)", len(left), err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	_ = exec.Command("fusermount3", "-uz", mnt).Run()

	rp, err := deleteq.ReadJournal(dir)
	if err != nil || len(rp.Pending) != n || rp.Damaged != 0 {
		t.Fatalf("journal after kill -9: %d pending, %d damaged, %v; want %d acknowledged deletions pending", len(rp.Pending), rp.Damaged, err, n)
	}
	var present int
	if err := c.Walk(ctx, "job/", func(s3client.Object) error { present++; return nil }); err != nil || present != n {
		t.Fatalf("%d objects in the bucket (%v), want all %d (nothing applied before the kill)", present, err, n)
	}

	// Restart: a checkpoint indexed meanwhile references ten of the queued keys.
	var refd []string
	for i := 0; i < n; i += 100 {
		refd = append(refd, fmt.Sprintf("job/shared/f%04d", i))
	}
	ck := newChecker(refd...)
	enf, err := guard.NewEnforcer(guard.Config{Checker: ck})
	if err != nil {
		t.Fatal(err)
	}
	m, err := s3mount.Mount(ctx, s3mount.Options{Client: c, Mountpoint: mnt, Enforcer: enf, SpoolDir: t.TempDir(), DeleteQueueDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Unmount() })
	fctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if left := m.FlushDeletes(fctx); left != 0 {
		t.Fatalf("%d deletions still pending after the restart's flush", left)
	}
	var kept []string
	if err := c.Walk(ctx, "job/", func(o s3client.Object) error { kept = append(kept, o.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(kept, ",") != strings.Join(refd, ",") {
		t.Errorf("after the restart the bucket holds %d keys (%v...), want exactly the %d referenced ones", len(kept), head(kept), len(refd))
	}
	if st := m.QueueStats(); st.Applied != int64(n-len(refd)) || st.Kept != int64(len(refd)) {
		t.Errorf("queue stats %+v, want %d applied, %d kept", st, n-len(refd), len(refd))
	}
	if rp, err := deleteq.ReadJournal(dir); err != nil || len(rp.Pending) != 0 {
		t.Errorf("journal after the drain: %d pending (%v)", len(rp.Pending), err)
	}
}
