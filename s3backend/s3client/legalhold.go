package s3client

import (
	"context"
	"errors"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// ObjectLockEnabled reports whether the bucket has Object Lock enabled (GetObjectLockConfiguration):
// only then does the server accept legal holds. A bucket without an Object Lock configuration answers
// false with a nil error (S3 answers ObjectLockConfigurationNotFoundError, a 404).
func (c *Client) ObjectLockEnabled(ctx context.Context) (bool, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.GetObjectLockConfiguration(ctx, &s3.GetObjectLockConfigurationInput{Bucket: &c.loc.Bucket}, attempts(ctx))
	if err != nil {
		if code := errorCode(err); code == "ObjectLockConfigurationNotFoundError" || code == "ObjectLockConfigurationNotFound" {
			return false, nil
		}
		return false, wrap("GetObjectLockConfiguration", "s3://"+c.loc.Bucket, err)
	}
	return out.ObjectLockConfiguration != nil && out.ObjectLockConfiguration.ObjectLockEnabled == types.ObjectLockEnabledEnabled, nil
}

// SetLegalHold puts a legal hold ON (on) or OFF on one version of rel (PutObjectLegalHold). A held
// version cannot be deleted by its version id, by any client or lifecycle rule, until the hold is OFF;
// a delete without a version id still adds a delete marker above it. Setting the state a version
// already has succeeds: the call is idempotent. versionID "" is the current version.
func (c *Client) SetLegalHold(ctx context.Context, rel, versionID string, on bool) error {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	st := types.ObjectLockLegalHoldStatusOff
	if on {
		st = types.ObjectLockLegalHoldStatusOn
	}
	in := &s3.PutObjectLegalHoldInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)), LegalHold: &types.ObjectLockLegalHold{Status: st}}
	if versionID != "" {
		in.VersionId = aws.String(versionID)
	}
	_, err := c.api.PutObjectLegalHold(ctx, in, attempts(ctx))
	return wrap("PutObjectLegalHold", c.url(rel)+versionSuffix(versionID), err)
}

// LegalHold reports whether one version of rel has a legal hold ON (GetObjectLegalHold).
func (c *Client) LegalHold(ctx context.Context, rel, versionID string) (bool, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	in := &s3.GetObjectLegalHoldInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel))}
	if versionID != "" {
		in.VersionId = aws.String(versionID)
	}
	out, err := c.api.GetObjectLegalHold(ctx, in, attempts(ctx))
	if err != nil {
		if code := errorCode(err); code == "NoSuchObjectLockConfiguration" {
			return false, nil // a version that never had a hold
		}
		return false, wrap("GetObjectLegalHold", c.url(rel)+versionSuffix(versionID), err)
	}
	return out.LegalHold != nil && out.LegalHold.Status == types.ObjectLockLegalHoldStatusOn, nil
}

func versionSuffix(v string) string {
	if v == "" {
		return ""
	}
	return "?versionId=" + v
}

// errorCode is the S3 error code of err ("" when it carries none).
func errorCode(err error) string {
	var apiErr interface{ ErrorCode() string }
	if errors.As(err, &apiErr) {
		return apiErr.ErrorCode()
	}
	return ""
}
