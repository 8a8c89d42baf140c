package s3mount_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// TestConcurrentReadsReuseBuffers: readahead buffers are pooled across files and handles; several readers
// of different objects at once, sequential and with random reads in between, each get exactly their bytes
// (a buffer handed to the next chunk while a reply still pointed into it would mix objects).
func TestConcurrentReadsReuseBuffers(t *testing.T) {
	e := setup(t, newChecker(), func(o *s3mount.Options) { o.ReadChunk = 256 << 10; o.ReadAhead = 3 })
	const files = 4
	bodies := make([][]byte, files)
	for i := range bodies {
		bodies[i] = make([]byte, 3<<20+1000*i+13)
		_, _ = rand.Read(bodies[i])
		if _, err := e.c.Upload(context.Background(), fmt.Sprintf("j/f%d", i), bytes.NewReader(bodies[i]), int64(len(bodies[i])), 8<<20, 2, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var wg sync.WaitGroup
	for round := range 3 {
		for i := range files {
			wg.Add(1)
			go func() {
				defer wg.Done()
				name := e.path(fmt.Sprintf("j/f%d", i))
				got, err := os.ReadFile(name)
				if err != nil || !bytes.Equal(got, bodies[i]) {
					t.Errorf("round %d: sequential read of f%d: %v, equal=%v", round, i, err, bytes.Equal(got, bodies[i]))
				}
				f, err := os.Open(name)
				if err != nil {
					t.Error(err)
					return
				}
				defer f.Close()
				p := make([]byte, 300<<10) // spans two chunks: served by copying
				for _, off := range []int64{0, 200 << 10, 1 << 20, 2<<20 + 7} {
					n, err := f.ReadAt(p, off)
					if err != nil || !bytes.Equal(p[:n], bodies[i][off:off+int64(n)]) {
						t.Errorf("round %d: read f%d at %d: %d %v", round, i, off, n, err)
					}
				}
			}()
		}
		wg.Wait()
	}
}

// TestKernelReadAhead: the mount raises the kernel's readahead for itself (the BDI's read_ahead_kb, 128 KiB
// by default for FUSE), so a sequential reader's READ requests carry up to 1 MiB each. Needs root.
func TestKernelReadAhead(t *testing.T) {
	e := setup(t, newChecker(), nil)
	var st syscall.Stat_t
	if err := syscall.Stat(e.mnt, &st); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev)))
	if err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() != 0 {
		t.Skipf("not root: read_ahead_kb stays %s", strings.TrimSpace(string(b)))
	}
	if got := strings.TrimSpace(string(b)); got != "4096" {
		t.Errorf("read_ahead_kb of the mount = %s, want 4096", got)
	}
}
