package s3hold

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/fs/hold"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Probe checks that the server can hold: the bucket has Object Lock (GetObjectLockConfiguration), and
// a legal hold can be set, read back and released on a probe object under the mount's prefix (which is
// then deleted by its version id). A nil error means holds work with these credentials.
func Probe(ctx context.Context, c *s3client.Client) error {
	bucket := "s3://" + c.Location().Bucket
	on, err := c.ObjectLockEnabled(ctx)
	if err != nil {
		return fmt.Errorf("could not read the Object Lock configuration of %s (s3:GetBucketObjectLockConfiguration): %w", bucket, err)
	}
	if !on {
		return fmt.Errorf("bucket %s has no Object Lock: legal holds need a bucket created with Object Lock enabled (aws s3api create-bucket --object-lock-enabled-for-bucket; on an existing versioned bucket: put-object-lock-configuration)", bucket)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	key := ".ckguard-hold-probe-" + hex.EncodeToString(b[:])
	if _, err := c.Put(ctx, key, strings.NewReader("probe"), 5, s3client.PutOptions{IfNoneMatch: true}); err != nil {
		return fmt.Errorf("hold probe: write %s: %w", key, err)
	}
	o, err := c.Head(ctx, key)
	if err != nil {
		return fmt.Errorf("hold probe: HEAD %s: %w", key, err)
	}
	cleanup := func() { _ = c.DeleteVersion(ctx, key, o.VersionID) }
	if err := c.SetLegalHold(ctx, key, o.VersionID, true); err != nil {
		cleanup()
		return fmt.Errorf("hold probe: the server refused a legal hold on %s (s3:PutObjectLegalHold): %w", key, err)
	}
	held, err := c.LegalHold(ctx, key, o.VersionID)
	if rerr := c.SetLegalHold(ctx, key, o.VersionID, false); rerr != nil {
		return fmt.Errorf("hold probe: could not release the legal hold on %s (remove it by hand: aws s3api put-object-legal-hold --legal-hold Status=OFF --version-id %s): %w", key, o.VersionID, rerr)
	}
	cleanup()
	if err != nil {
		return fmt.Errorf("hold probe: read the legal hold of %s (s3:GetObjectLegalHold): %w", key, err)
	}
	if !held {
		return fmt.Errorf("hold probe: the server accepted a legal hold on %s but does not report it held", key)
	}
	return nil
}

// Register adds the holds' metrics to reg: the engine's gauges and the count of heals.
func Register(reg prometheus.Registerer, h *Holder) error {
	if err := hold.Register(reg, h.Engine, "the current version's S3 legal hold"); err != nil {
		return err
	}
	return reg.Register(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_healed_objects_total", Help: "Held referenced objects brought back by removing a delete marker a client beside the mount put on them."},
		func() float64 { return float64(h.Status().Healed) }))
}
