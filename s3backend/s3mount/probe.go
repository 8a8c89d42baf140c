package s3mount

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// ProbeIfMatch checks that the server honours If-Match on DeleteObject: it writes a small probe object
// under the mount's prefix and deletes it with a wrong ETag, which must fail with 412. The guard's deletes
// rely on it: a decision may use an ETag up to ETagTTL old because a replaced object makes the conditional
// delete fail. On a server that ignores the condition (older S3-compatible servers) the mount must stat
// afresh before every decision instead (Options.FreshETags). An error means the probe could not run
// (read-only credentials, network); callers treat that as "not honoured" — the safe side.
func ProbeIfMatch(ctx context.Context, c *s3client.Client) (bool, error) {
	key, etag, wrong, err := putProbe(ctx, c, "ifmatch", "if-match probe")
	if err != nil {
		return false, err
	}
	err = c.Delete(ctx, key, wrong)
	if errors.Is(err, s3client.ErrPrecondition) {
		if derr := c.Delete(ctx, key, etag); derr != nil {
			// The wrong ETag was refused, but so was the right one (a server that answers 412 to every
			// conditional delete, or a fault): not shown to honour the condition, so not relied on
			//. The probe object goes unconditionally.
			_ = c.Delete(ctx, key, "")
			return false, fmt.Errorf("if-match probe: delete of %s with its own ETag failed: %w", key, derr)
		}
		return true, nil
	}
	if err != nil {
		_ = c.Delete(ctx, key, "")
		return false, fmt.Errorf("if-match probe: conditional delete of %s: %w", key, err)
	}
	return false, nil // deleted despite the wrong ETag
}

// putProbe writes a fresh probe object (.ckguard-<kind>-probe-<random>, create-only, so it never meets a
// real object) and returns its key, its ETag and an ETag guaranteed to differ from it, for a probe that
// must see a delete with the wrong ETag refused. label prefixes the error.
func putProbe(ctx context.Context, c *s3client.Client, kind, label string) (key, etag, wrong string, err error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", "", err
	}
	key = ".ckguard-" + kind + "-probe-" + hex.EncodeToString(b[:])
	etag, err = c.Put(ctx, key, strings.NewReader("probe"), 5, s3client.PutOptions{IfNoneMatch: true})
	if err != nil {
		return "", "", "", fmt.Errorf("%s: write %s: %w", label, key, err)
	}
	wrong = "0123456789abcdef0123456789abcdef"
	if etag == wrong {
		wrong = "fedcba9876543210fedcba9876543210"
	}
	return key, etag, wrong, nil
}
