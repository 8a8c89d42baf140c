package s3client

import (
	"context"
	"sync/atomic"

	"github.com/aws/smithy-go/middleware"
)

// Traffic counts the requests a client sends on behalf of the mount (FUSE operations, the index's
// syncs, the delete queue): the foreground. Background work (the loss check) marks its context with
// Background and is not counted, so it can pace itself against what the foreground sends.
type Traffic struct {
	fg atomic.Int64
}

// Foreground is the number of foreground requests sent so far (every attempt of a retried request).
func (t *Traffic) Foreground() int64 {
	if t == nil {
		return 0
	}
	return t.fg.Load()
}

type backgroundKey struct{}

// Background marks ctx: the requests made with it are background work, not counted by Traffic.
func (t *Traffic) Background(ctx context.Context) context.Context {
	return context.WithValue(ctx, backgroundKey{}, true)
}

// middleware counts every attempt of a foreground request: it sits in the finalize step after the
// retry loop, so a retried request counts once per attempt sent.
func (t *Traffic) middleware(st *middleware.Stack) error {
	return st.Finalize.Add(middleware.FinalizeMiddlewareFunc("ckguardTraffic",
		func(ctx context.Context, in middleware.FinalizeInput, next middleware.FinalizeHandler) (middleware.FinalizeOutput, middleware.Metadata, error) {
			if bg, _ := ctx.Value(backgroundKey{}).(bool); !bg {
				t.fg.Add(1)
			}
			return next.HandleFinalize(ctx, in)
		}), middleware.After)
}
