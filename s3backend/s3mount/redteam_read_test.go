package s3mount_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3mount"
)

// TestRedteamManyOpenReadersBounded: any user of an --allow-other mount can open objects by the
// thousand and read one byte of each, keeping them open. Each such read looked sequential (offset 0),
// so it made the daemon fetch and hold ReadAhead+1 chunks: memory and GETs without bound, by the number
// of open files. With the chunks of all open files bounded by ReadMemory, those reads fetch what they
// ask for once the bound is reached, every byte read is right, and a sequential reader still reads
// ahead once the files are closed.
func TestRedteamManyOpenReadersBounded(t *testing.T) {
	const chunk, ahead, budget = 256 << 10, 8, 2 << 20 // the budget holds 8 chunks: not one reader's 9
	e, p := setupProxied(t, func(o *s3mount.Options) { o.ReadChunk = chunk; o.ReadAhead = ahead; o.ReadMemory = budget })
	const files = 24
	bodies := make([][]byte, files)
	for i := range bodies {
		bodies[i] = make([]byte, (ahead+1)*chunk+4096)
		_, _ = rand.Read(bodies[i])
		if _, err := e.c.Upload(context.Background(), fmt.Sprintf("many/f%02d", i), bytes.NewReader(bodies[i]), int64(len(bodies[i])), 8<<20, 2, s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	before := p.Ops()["GetObject"]
	var open []*os.File
	defer func() {
		for _, f := range open {
			f.Close()
		}
	}()
	for i := range files {
		f, err := os.Open(e.path(fmt.Sprintf("many/f%02d", i)))
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, 0); err != nil || b[0] != bodies[i][0] {
			t.Fatalf("read of f%02d: %v", i, err)
		}
	}
	gets := p.Ops()["GetObject"] - before
	// Each 1-byte read is at most a few READ requests of the kernel's (its readahead), one GET each past
	// the budget; unbounded, each file alone is ahead+1 = 9 chunk GETs (216 here).
	if max := int64(budget/chunk + 4*files); gets > max {
		t.Errorf("%d open files, one byte read from each: %d GETs, want at most %d", files, gets, max)
	}
	if held := e.m.ChunkBytes(); held > budget {
		t.Errorf("the open files hold %d bytes of chunks, more than ReadMemory %d", held, budget)
	}
	t.Logf("%d open files, one byte read from each: %d GETs, %d bytes of chunks held", files, gets, e.m.ChunkBytes())
	for _, f := range open {
		f.Close()
	}
	open = nil
	// Closed: the chunks are given back, and a sequential reader reads ahead again, byte for byte.
	if held := e.m.ChunkBytes(); held != 0 {
		t.Errorf("%d bytes of chunks held after every file was closed", held)
	}
	before = p.Ops()["GetObject"]
	f, err := os.Open(e.path("many/f00"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 0); err != nil || b[0] != bodies[0][0] {
		t.Fatalf("read of f00 after the others closed: %v", err)
	}
	// A read past ReadMemory holds no chunk; a sequential reader's first read fetches chunks ahead.
	if held := e.m.ChunkBytes(); held == 0 {
		t.Errorf("a sequential reader alone on the mount holds no chunk: it reads exact ranges, not ahead")
	}
	got, err := io.ReadAll(f)
	if err != nil || !bytes.Equal(got, bodies[0]) {
		t.Fatalf("sequential read of f00: %d bytes, %v", len(got), err)
	}
	// Each chunk once, plus at most one exact-range GET per READ the kernel sends while the reader's
	// own consumed chunks are still being given back (the budget here is below one reader's window).
	chunks := (int64(len(bodies[0])) + chunk - 1) / chunk
	gets = p.Ops()["GetObject"] - before
	if gets > 2*chunks {
		t.Errorf("sequential read of %d bytes: %d GETs, want about the chunks' %d (readahead)", len(bodies[0]), gets, chunks)
	}
	t.Logf("sequential read of %d bytes (%d chunks): %d GETs", len(bodies[0]), chunks, gets)
}
