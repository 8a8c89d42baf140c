package s3client

import (
	"context"
	"errors"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/s3"
)

type oneAttemptKey struct{}

// OneAttempt marks ctx: every SDK call the client makes with it sends its request once, without the
// retryer's further attempts and backoff. Callers that hold the enforcer's lock while a request is in
// flight (a delete queue round, a synchronous unlink) use it, so a failing or throttling server costs
// the lock one request's time, never a retry loop; they retry after the lock is released, deciding
// again first.
func OneAttempt(ctx context.Context) context.Context {
	return context.WithValue(ctx, oneAttemptKey{}, true)
}

// IsOneAttempt reports whether ctx was marked by OneAttempt.
func IsOneAttempt(ctx context.Context) bool {
	one, _ := ctx.Value(oneAttemptKey{}).(bool)
	return one
}

// attempts is the per-call option of every SDK call of the client: a single attempt for a context
// marked by OneAttempt, the configured retries otherwise.
func attempts(ctx context.Context) func(*s3.Options) {
	return func(o *s3.Options) {
		if IsOneAttempt(ctx) {
			o.RetryMaxAttempts = 1
		}
	}
}

// Retryable reports whether a request sent with OneAttempt failed in a way the client's own retryer
// would have retried (throttling, 5xx, a timeout, a broken connection), and not because the caller
// gave up: its caller may send it again, after Backoff and a fresh decision.
func Retryable(err error) bool {
	return errors.Is(err, ErrUnavailable) && !errors.Is(err, context.Canceled)
}

// MaxAttempts is the configured bound on attempts per request (Config.MaxAttempts, the first included):
// a caller retrying requests it sends with OneAttempt stops there, as the client's retryer would.
func (c *Client) MaxAttempts() int { return c.cfg.MaxAttempts }

// OpTimeout bounds one logical operation including its retries (Config.OpTimeout): a caller retrying
// OneAttempt requests itself keeps its attempts within it, as the client's retryer does.
func (c *Client) OpTimeout() time.Duration { return c.cfg.OpTimeout }

// Backoff is the wait before retry number attempt (1 for the first retry), the client's own: exponential
// with full jitter from 50 ms, capped at Config.MaxBackoff.
func (c *Client) Backoff(attempt int) time.Duration {
	d, _ := jitterBackoff{base: 50 * time.Millisecond, max: c.cfg.MaxBackoff}.BackoffDelay(attempt, nil)
	return d
}
