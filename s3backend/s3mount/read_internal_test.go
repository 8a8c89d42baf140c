package s3mount

import (
	"bytes"
	"context"
	"crypto/rand"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestReadsOutOfOrderFetchEachChunkOnce: the kernel's readahead sends several READs at once and they
// reach the mount in any order. A READ of the start of the file that arrives after READs further on
// reads its own chunks, but must not fetch again, as readahead, the chunks the later READs consumed
// and left behind: a sequential read fetches each chunk once, in whatever order its READs arrive.
func TestReadsOutOfOrderFetchEachChunkOnce(t *testing.T) {
	const chunk, ahead = 256 << 10, 8
	const size = 9*chunk + 4096 // 10 chunks, the last one short
	type span struct{ off, end int64 }
	a, b, c := span{0, 4 * chunk}, span{4 * chunk, 8 * chunk}, span{8 * chunk, size} // 1 MiB READs
	srv := s3server.Start(t)
	srv.Bucket(t, "ckpt")
	p := s3server.NewProxy(t, srv.Endpoint)
	cfg := srv.Config()
	cfg.Endpoint = p.URL
	cl, err := s3client.New(context.Background(), cfg, s3client.Location{Bucket: "ckpt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, size)
	_, _ = rand.Read(body)
	etag, err := cl.Upload(context.Background(), "f", bytes.NewReader(body), size, 8<<20, 2, s3client.PutOptions{})
	if err != nil {
		t.Fatal(err)
	}
	o := s3client.Object{Size: size, ETag: etag}
	fsys := &filesystem{c: cl, opts: Options{ReadChunk: chunk, ReadAhead: ahead, ReadMemory: 64 << 20}}
	for _, tc := range []struct {
		name  string
		order []span
	}{
		{"in order", []span{a, b, c}},
		{"the first last", []span{b, c, a}},
		{"reversed", []span{c, b, a}},
		{"the middle last", []span{a, c, b}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReadHandle(fsys, "f", o)
			defer r.Release(context.Background())
			before := p.Ops()["GetObject"]
			for _, s := range tc.order {
				dest := make([]byte, s.end-s.off)
				res, errno := r.Read(context.Background(), dest, s.off)
				if errno != 0 {
					t.Fatalf("read [%d, %d): %v", s.off, s.end, errno)
				}
				got, _ := res.Bytes(make([]byte, len(dest)))
				if !bytes.Equal(got, body[s.off:s.end]) {
					t.Fatalf("read [%d, %d): wrong bytes", s.off, s.end)
				}
				res.Done()
			}
			if gets := p.Ops()["GetObject"] - before; gets != 10 {
				t.Errorf("READs %v: %d GETs, want each of the 10 chunks fetched once", tc.order, gets)
			}
		})
	}
}
