package s3shared_test

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3shared"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

// TestRedteamS3SharedRecords, on versitygw: a hold and a pin of keys that are not UTF-8 keep their
// exact keys through the bucket (the lease holder's orphan listing and every mount's pins load go on);
// a restore claim object of hostile length (5 MiB) or that is not JSON, put beside the mounts by
// anyone with s3:PutObject on the prefix, refuses only that entry's restore, as damaged, at once.
func TestRedteamS3SharedRecords(t *testing.T) {
	srv := s3server.Start(t)
	srv.Bucket(t, "bkt")
	ctx := context.Background()
	cl, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "bkt", Prefix: "store/"})
	if err != nil {
		t.Fatal(err)
	}
	c := s3shared.New(cl)

	odd := "job/shared/\xff\xfe\nnot-utf8"
	h := shared.NewHolds(c, "hosta-m")
	if err := h.Need(ctx, odd, "v1"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.Drop(ctx, odd, false); err != nil {
		t.Fatal(err)
	}
	orphans, err := shared.NewHolds(c, "hostb-m").Orphans(ctx)
	if err != nil || len(orphans) != 1 || orphans[0].Key != odd || orphans[0].Version != "v1" {
		t.Fatalf("orphans: %q %v", orphans, err)
	}
	if _, err := shared.NewPins(c, "hosta").Set(ctx, odd+"/_metadata", true, "op"); err != nil {
		t.Fatal(err)
	}
	pins, err := shared.NewPins(c, "hostb").Load(ctx)
	if _, ok := pins[odd+"/_metadata"]; err != nil || !ok {
		t.Fatalf("pins: %q %v", pins, err)
	}

	plant := func(id string, body []byte) {
		_, err := cl.API().PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String("bkt"), Key: aws.String("store/" + shared.Prefix + shared.RestoreName(id)), Body: bytes.NewReader(body)})
		if err != nil {
			t.Fatal(err)
		}
	}
	plant("huge", bytes.Repeat([]byte{'{'}, 5<<20))
	plant("garbage", []byte("\x00\xffnot json"))
	rc := &shared.RestoreClaims{C: c, Mount: "hostb-m", Host: "hostb"}
	for _, id := range []string{"huge", "garbage"} {
		t0 := time.Now()
		_, err := rc.Claim(ctx, id, "job/f")
		var damaged *shared.DamagedError
		if !errors.As(err, &damaged) || !strings.Contains(err.Error(), "nothing was moved") {
			t.Errorf("%s: claim over a planted record: %v", id, err)
		}
		if d := time.Since(t0); d > 3*time.Second {
			t.Errorf("%s: refused after %v: read again and again", id, d)
		}
	}
	done, err := rc.Claim(ctx, "other", "job/g")
	if err != nil {
		t.Fatalf("a planted record of another entry refused this one: %v", err)
	}
	done(nil)
}
