package s3hold

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// Modes of --hold.
const (
	ModeOff        = "off"
	ModeBestEffort = "best-effort"
	ModeRequired   = "required"
)

// ParseMode checks a --hold value ("" is off).
func ParseMode(s string) (string, error) {
	switch s {
	case "", ModeOff:
		return ModeOff, nil
	case ModeBestEffort, ModeRequired:
		return s, nil
	}
	return "", fmt.Errorf("--hold %q: want off, best-effort or required", s)
}

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

// StatusName is the file in the index directory the mount writes its Status to after every pass:
// `ckguard hold status` and `ckguard stats` read it.
const StatusName = "holds-status.json"

// WriteStatus writes s to dir's StatusName (atomically).
func WriteStatus(dir string, s Status) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := filepath.Join(dir, StatusName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, StatusName))
}

// ReadStatus reads what a mount wrote in dir (os.ErrNotExist: no mount with --hold wrote one).
func ReadStatus(dir string) (Status, error) {
	var s Status
	b, err := os.ReadFile(filepath.Join(dir, StatusName))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, StatusName), err)
	}
	return s, nil
}

// Register adds the holds' metrics to reg, read from h's Status at every scrape.
func Register(reg prometheus.Registerer, h *Holder) error {
	g := func(opts prometheus.GaugeOpts, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(opts, func() float64 { return f(h.Status()) })
	}
	cs := []prometheus.Collector{
		g(prometheus.GaugeOpts{Name: "ckguard_hold_active", Help: "1 when legal holds are applied (--hold and a bucket with Object Lock), 0 when --hold best-effort runs without them."},
			func(s Status) float64 { return b2f(s.Active) }),
		g(prometheus.GaugeOpts{Name: "ckguard_held_objects", Help: "Objects whose current version the mount holds with an S3 legal hold."}, func(s Status) float64 { return float64(s.Held) }),
		g(prometheus.GaugeOpts{Name: "ckguard_held_bytes", Help: "Bytes of the objects the mount holds."}, func(s Status) float64 { return float64(s.HeldBytes) }),
		g(prometheus.GaugeOpts{Name: "ckguard_holds_pending", Help: "Protected objects whose hold (or release) was announced and not answered yet."}, func(s Status) float64 { return float64(s.Pending + s.Releasing) }),
		g(prometheus.GaugeOpts{Name: "ckguard_holds_failed", Help: "Objects whose last hold or release attempt the server refused or failed (retried every pass)."}, func(s Status) float64 { return float64(s.Failed) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "ckguard_healed_objects_total", Help: "Held referenced objects brought back by removing a delete marker a client beside the mount put on them."},
			func() float64 { return float64(h.healed.Load()) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
