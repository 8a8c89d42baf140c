package hdfsmount_test

import (
	"bytes"
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/fs/guard/guardtest"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient/hdfsfake"
	"github.com/ckguard/ckguard/hdfsbackend/hdfsmount"
)

// readCounter is an hdfsclient.FS that counts the opens and reads the mount makes of its files.
type readCounter struct {
	*hdfsfake.FS
	mu    sync.Mutex
	opens int
	reads []int // the size of each ReadAt
}

type countedReader struct {
	hdfsclient.Reader
	c *readCounter
}

func (r countedReader) ReadAt(p []byte, off int64) (int, error) {
	r.c.mu.Lock()
	r.c.reads = append(r.c.reads, len(p))
	r.c.mu.Unlock()
	return r.Reader.ReadAt(p, off)
}

func (c *readCounter) Open(ctx context.Context, name string) (hdfsclient.Reader, error) {
	r, err := c.FS.Open(ctx, name)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.opens++
	c.mu.Unlock()
	return countedReader{r, c}, nil
}

// TestSequentialReadIsReadAhead: a reader that asks 4 KiB at a time (a shell tool, a Python copy)
// reaches HDFS as one open and a few large reads, not one client read per 4 KiB: the mount lets the
// kernel read ahead (MaxReadAhead 1 MiB, read_ahead_kb raised to 4 MiB as root). The bytes arrive
// intact.
// (This is the mount's side; the real client makes one DataNode block read per ReadAt.)
func TestSequentialReadIsReadAhead(t *testing.T) {
	if testing.Short() {
		t.Skip("FUSE mount not run in -short mode")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skip("no /dev/fuse")
	}
	f := &readCounter{FS: hdfsfake.New("flink")}
	if err := f.MkdirAll(context.Background(), dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const size = 8 << 20
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7 / 5)
	}
	if err := f.Put(dir+"/job/shared/big.sst", data, time.Now()); err != nil {
		t.Fatal(err)
	}
	enf, err := guard.NewEnforcer(guard.Config{Checker: guardtest.New()})
	if err != nil {
		t.Fatal(err)
	}
	mnt := t.TempDir()
	m, err := hdfsmount.Mount(context.Background(), hdfsmount.Options{FS: f, Dir: dir, Name: "hdfs://nn:8020" + dir, Mountpoint: mnt, Enforcer: enf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := m.Unmount(); err != nil {
			_ = exec.Command("fusermount3", "-uz", mnt).Run()
		}
	})
	fd, err := os.Open(filepath.Join(mnt, "job/shared/big.sst"))
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	buf := make([]byte, 4096)
	for {
		n, err := fd.Read(buf)
		got.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	fd.Close()
	if !bytes.Equal(got.Bytes(), data) {
		t.Fatalf("read %d bytes through the mount, not the file's %d", got.Len(), size)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	largest := 0
	for _, n := range f.reads {
		largest = max(largest, n)
	}
	// 4 KiB reads would be 2048 client reads. As root the mount raises the kernel's readahead for itself
	// (read_ahead_kb), so READ requests carry 1 MiB once the window has grown; otherwise the kernel's
	// 128 KiB applies. The first requests of a file are smaller while the window grows.
	reqSize := 128 << 10
	if os.Geteuid() == 0 {
		reqSize = 1 << 20
	}
	if most := size / (reqSize / 2); f.opens != 1 || len(f.reads) > most || largest < reqSize {
		t.Errorf("a sequential 4 KiB-at-a-time read of %d MiB made %d opens and %d client reads (largest %d bytes), want 1 open and at most %d reads of up to %d bytes", size>>20, f.opens, len(f.reads), largest, most, reqSize)
	}
	t.Logf("%d MiB read as %d client reads, largest %d KiB", size>>20, len(f.reads), largest>>10)
}
