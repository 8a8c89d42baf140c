package s3quarantine

import (
	"context"
	"errors"
	"testing"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// rewritingClient serves a record that is rewritten once between its listing and its read.
type rewritingClient struct {
	body      string
	etag      string
	rewritten bool
}

func (c *rewritingClient) Head(context.Context, string) (s3client.Object, error) {
	return s3client.Object{Key: "r.json", Size: int64(len(c.body)), ETag: c.etag}, nil
}

func (c *rewritingClient) ReadAt(_ context.Context, _ string, p []byte, _ int64, ifMatch string) (int, error) {
	if !c.rewritten {
		c.rewritten, c.body, c.etag = true, `{"id":"new"}`, "e2"
	}
	if ifMatch != c.etag {
		return 0, s3client.ErrPrecondition
	}
	return copy(p, c.body), nil
}

// A record rewritten between the listing and the read is read as it is now, not reported as a problem.
func TestRecordRewrittenSinceListingIsReadAgain(t *testing.T) {
	c := &rewritingClient{body: `{"id":"old"}`, etag: "e1"}
	b, err := readRecordBytes(context.Background(), c, s3client.Object{Key: "r.json", Size: 12, ETag: "e1"})
	if err != nil || string(b) != `{"id":"new"}` {
		t.Fatalf("read %q, %v; want the rewritten record", b, err)
	}
	// A record that changes at every read is a problem after a few tries, never a loop.
	always := &flappingClient{}
	if _, err := readRecordBytes(context.Background(), always, s3client.Object{Key: "r.json", Size: 2, ETag: "x"}); !errors.Is(err, s3client.ErrPrecondition) {
		t.Fatalf("a record rewritten at every read: %v, want the precondition error", err)
	}
	if always.reads != 4 {
		t.Fatalf("%d reads of a record rewritten at every read, want 4", always.reads)
	}
}

type flappingClient struct{ reads int }

func (c *flappingClient) Head(context.Context, string) (s3client.Object, error) {
	return s3client.Object{Key: "r.json", Size: 2, ETag: "y"}, nil
}

func (c *flappingClient) ReadAt(context.Context, string, []byte, int64, string) (int, error) {
	c.reads++
	return 0, s3client.ErrPrecondition
}
