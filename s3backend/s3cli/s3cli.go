// Package s3cli is the CLI plumbing of the S3 backend: the --s3-* flags every command taking --store
// accepts, and opening an s3:// store. cmd/ckguard calls it; it holds no state.
package s3cli

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3store"
)

// IsURL reports whether a --store value names an S3 location (s3://, s3a://, s3p://).
func IsURL(store string) bool {
	for _, p := range []string{"s3://", "s3a://", "s3p://", "s3n://"} {
		if strings.HasPrefix(store, p) {
			return true
		}
	}
	return false
}

// Flags are the S3 client flags. Credentials come from the standard AWS chain (AWS_ACCESS_KEY_ID/
// AWS_SECRET_ACCESS_KEY, AWS_PROFILE and shared config files, web identity, ECS/EC2 roles).
func Flags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "s3-endpoint", EnvVars: []string{"CKGUARD_S3_ENDPOINT", "AWS_ENDPOINT_URL_S3"}, Usage: "S3 endpoint URL for S3-compatible servers (Ceph RGW, MinIO, SeaweedFS, versitygw); empty = AWS"},
		&cli.StringFlag{Name: "s3-region", EnvVars: []string{"CKGUARD_S3_REGION"}, Usage: "S3 region (default: AWS_REGION / profile, else us-east-1)"},
		&cli.BoolFlag{Name: "s3-path-style", EnvVars: []string{"CKGUARD_S3_PATH_STYLE"}, Usage: "address buckets as endpoint/bucket (most S3-compatible servers need this)"},
		&cli.StringFlag{Name: "s3-profile", Usage: "AWS shared-config profile"},
		&cli.IntFlag{Name: "s3-max-attempts", Value: 5, Usage: "attempts per S3 request (throttling, 5xx and network errors are retried with backoff)"},
		&cli.BoolFlag{Name: "s3-full-walk", Usage: "find _metadata by listing the whole prefix at every sync (complete for any layout; costs one request per 1,000 objects) instead of delimiter listings down to the checkpoint folders plus a background reconciliation walk"},
		duration.Flag("s3-reconcile-every", time.Hour, "shortest interval between a mount's reconciliation walks, which find _metadata where Flink does not write them (the interval is also at least 10 times the last walk's duration)"),
		duration.Flag("s3-timeout", 60*time.Second, "bound on one S3 operation including its retries; then the file operation fails with EIO"),
	}
}

// Config builds the client configuration from the flags.
func Config(c *cli.Context) s3client.Config {
	return s3client.Config{
		Endpoint:    c.String("s3-endpoint"),
		Region:      c.String("s3-region"),
		PathStyle:   c.Bool("s3-path-style"),
		Profile:     c.String("s3-profile"),
		MaxAttempts: c.Int("s3-max-attempts"),
		OpTimeout:   c.Duration("s3-timeout"),

		FullWalk:       c.Bool("s3-full-walk"),
		ReconcileEvery: c.Duration("s3-reconcile-every"),
	}
}

// OpenStore opens the s3:// store named by url and checks that the bucket is reachable.
func OpenStore(ctx context.Context, url string, cfg s3client.Config) (*s3store.Store, error) {
	loc, err := s3client.ParseURL(url)
	if err != nil {
		return nil, err
	}
	cl, err := s3client.New(ctx, cfg, loc)
	if err != nil {
		return nil, err
	}
	if err := cl.Check(ctx); err != nil {
		return nil, fmt.Errorf("store %s: %w (check --s3-endpoint, --s3-path-style and credentials)", url, err)
	}
	// A one-shot command: no background reconciliation (its rebuild, orphans and verify walk the store
	// or stat what they need); a mount sets its own options (s3guardd).
	return s3store.New(cl, s3store.Options{FullWalk: cfg.FullWalk, ReconcileEvery: -1}), nil
}
