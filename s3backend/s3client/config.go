// Package s3client is ckguard's narrow S3 access layer on aws-sdk-go-v2: one bucket and key prefix, paths
// relative to that prefix, bounded retries and timeouts, and every S3 error mapped to an errno in one place
// (errno.go). The index's Store (s3store) and the FUSE tree (s3mount) are built on it.
package s3client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// Config selects the server and tunes the client. The zero value works against AWS S3 with the standard
// credential chain (environment, shared config/profiles, web identity, container and instance roles).
type Config struct {
	Endpoint  string // --s3-endpoint, e.g. http://127.0.0.1:7070; empty = AWS
	Region    string // --s3-region; empty = from the environment/profile, else us-east-1
	PathStyle bool   // --s3-path-style: bucket in the path (most S3-compatible servers need it)
	Profile   string // shared-config profile; empty = AWS_PROFILE / default

	// MaxAttempts bounds retries per request (first try included). Default 5.
	MaxAttempts int
	// MaxBackoff bounds the wait between two attempts. Default 2s.
	MaxBackoff time.Duration
	// OpTimeout bounds one logical operation including its retries and, for reads, the body transfer.
	// Default 60s. A hung server therefore turns into EIO instead of a hung rm.
	OpTimeout time.Duration
	// ConnectTimeout bounds TCP connect and TLS handshake. Default 5s.
	ConnectTimeout time.Duration
	// MaxConns bounds parallel connections to the server. Default 64.
	MaxConns int

	// Static credentials (tests); empty = standard chain.
	AccessKey, SecretKey string

	// How the store finds `_metadata` (s3store.Options; the client itself ignores them): FullWalk
	// (--s3-full-walk) lists the whole prefix at every sync; ReconcileEvery (--s3-reconcile-every) is
	// the shortest interval between the background reconciliation walks of a mount.
	FullWalk       bool
	ReconcileEvery time.Duration

	// Traffic, when set, counts the requests the client sends on behalf of the mount (the loss check
	// paces itself against them).
	Traffic *Traffic
}

func (c Config) withDefaults() Config {
	if c.MaxAttempts <= 0 {
		c.MaxAttempts = 5
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 2 * time.Second
	}
	if c.OpTimeout <= 0 {
		c.OpTimeout = 60 * time.Second
	}
	if c.ConnectTimeout <= 0 {
		c.ConnectTimeout = 5 * time.Second
	}
	if c.MaxConns <= 0 {
		c.MaxConns = 64
	}
	return c
}

// Location is a bucket and a key prefix ("" or ending in '/').
type Location struct {
	Bucket string
	Prefix string
}

func (l Location) String() string { return "s3://" + l.Bucket + "/" + l.Prefix }

// ParseURL parses s3://bucket/prefix (also s3a:// and s3p://, which name the same objects).
func ParseURL(raw string) (Location, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("parse S3 URL %q: %w", raw, err)
	}
	switch u.Scheme {
	case "s3", "s3a", "s3p", "s3n":
	default:
		return Location{}, fmt.Errorf("parse S3 URL %q: scheme must be s3://, s3a:// or s3p://", raw)
	}
	if u.Host == "" {
		return Location{}, fmt.Errorf("parse S3 URL %q: no bucket (want s3://bucket/prefix)", raw)
	}
	p := strings.Trim(cleanKey(u.Path), "/")
	if p != "" {
		p += "/"
	}
	return Location{Bucket: u.Host, Prefix: p}, nil
}

// cleanKey collapses duplicate slashes, as the index's canonical keys do.
func cleanKey(p string) string {
	for strings.Contains(p, "//") {
		p = strings.ReplaceAll(p, "//", "/")
	}
	return p
}

// New builds a client for loc. It does not contact the server; call Check for that.
func New(ctx context.Context, cfg Config, loc Location) (*Client, error) {
	cfg = cfg.withDefaults()
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second}
	httpClient := awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
		t.DialContext = dialer.DialContext
		t.TLSHandshakeTimeout = cfg.ConnectTimeout
		// A server that accepts the request but never answers must not hang a FUSE op forever.
		t.ResponseHeaderTimeout = cfg.OpTimeout
		t.MaxIdleConns = cfg.MaxConns * 2
		t.MaxIdleConnsPerHost = cfg.MaxConns
		t.MaxConnsPerHost = cfg.MaxConns
	})
	opts := []func(*config.LoadOptions) error{
		config.WithHTTPClient(httpClient),
		config.WithRetryer(func() aws.Retryer {
			// Standard mode: exponential backoff with full jitter from 50 ms (the SDK's default starts near 1 s,
			// which made every 503 cost an rm a second), bounded attempts and backoff, so a dead server
			// surfaces as EIO within OpTimeout. Not adaptive mode: its client-side rate limiter, fed by a
			// bursty FUSE workload (one rm = many short bursts), cut unlink throughput to about 0.6/s behind a
			// proxy failing 10% of requests with 503 (TestS3Flaky503), where plain backoff costs ~10%.
			// The retry quota (token bucket) is disabled: under a bulk rm it would turn a brief server hiccup
			// into failures of unrelated requests.
			return retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = cfg.MaxAttempts
				so.MaxBackoff = cfg.MaxBackoff
				so.RateLimiter = ratelimit.None
				so.Backoff = jitterBackoff{base: 50 * time.Millisecond, max: cfg.MaxBackoff}
			})
		}),
	}
	if cfg.Profile != "" {
		opts = append(opts, config.WithSharedConfigProfile(cfg.Profile))
	}
	if cfg.Region != "" {
		opts = append(opts, config.WithRegion(cfg.Region))
	}
	if cfg.AccessKey != "" {
		opts = append(opts, config.WithCredentialsProvider(aws.CredentialsProviderFunc(
			func(context.Context) (aws.Credentials, error) {
				return aws.Credentials{AccessKeyID: cfg.AccessKey, SecretAccessKey: cfg.SecretKey, Source: "ckguard-static"}, nil
			})))
	}
	awsCfg, err := config.LoadDefaultConfig(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("load AWS configuration: %w", err)
	}
	if awsCfg.Region == "" {
		// S3-compatible servers rarely care; AWS redirects. Better than refusing to start.
		awsCfg.Region = "us-east-1"
	}
	endpoint := cfg.Endpoint
	if endpoint == "" {
		endpoint = os.Getenv("AWS_ENDPOINT_URL_S3")
	}
	api := s3.NewFromConfig(awsCfg, func(o *s3.Options) {
		if endpoint != "" {
			o.BaseEndpoint = aws.String(endpoint)
		}
		o.UsePathStyle = cfg.PathStyle
		// Checksums only where S3 requires them: many S3-compatible servers do not support the newer
		// flexible checksums, and ranged GETs cannot be validated against a whole-object checksum anyway.
		// Integrity of uploads is still covered by Content-MD5/ETag and TCP; reads of _metadata are parsed
		// and rejected when corrupt.
		o.RequestChecksumCalculation = aws.RequestChecksumCalculationWhenRequired
		o.ResponseChecksumValidation = aws.ResponseChecksumValidationWhenRequired
		o.DisableLogOutputChecksumValidationSkipped = true
		if cfg.Traffic != nil {
			o.APIOptions = append(o.APIOptions, cfg.Traffic.middleware)
		}
	})
	return &Client{api: api, loc: loc, cfg: cfg, sdkList: sdkListDecoderFromEnv()}, nil
}

// jitterBackoff is exponential backoff with full jitter: attempt n waits rand[0, base·2^(n-1)), capped at max.
type jitterBackoff struct{ base, max time.Duration }

func (b jitterBackoff) BackoffDelay(attempt int, _ error) (time.Duration, error) {
	d := b.base << min(attempt-1, 20)
	if d > b.max || d <= 0 {
		d = b.max
	}
	return time.Duration(rand.Int64N(int64(d) + 1)), nil
}
