package control

import (
	"context"
	"log/slog"
	"reflect"
	"time"

	"github.com/ckguard/ckguard/refindex"
)

// ServeQuerier serves q (the mount's index) on the socket at path.
func ServeQuerier(path string, q refindex.Querier, log *slog.Logger) (*Server, error) {
	return Listen(path, q, reflect.TypeFor[refindex.Querier](), log)
}

// Querier is a refindex.Querier answered by a running mount over its control socket.
type Querier struct{ c *Client }

var _ refindex.Querier = (*Querier)(nil)

// DialQuerier connects to the control socket at path; it fails fast when no mount serves it.
func DialQuerier(path string) (*Querier, error) {
	c, err := Dial(path)
	if err != nil {
		return nil, err
	}
	return &Querier{c: c}, nil
}

// Close releases the client's connections.
func (q *Querier) Close() error { return q.c.Close() }

func (q *Querier) Why(ctx context.Context, path string) (*refindex.WhyResult, error) {
	var r *refindex.WhyResult
	return r, q.c.Call(ctx, "Why", []any{path}, &r)
}

func (q *Querier) Checkpoints(ctx context.Context, job string) (*refindex.CheckpointsResult, error) {
	var r *refindex.CheckpointsResult
	return r, q.c.Call(ctx, "Checkpoints", []any{job}, &r)
}

func (q *Querier) Orphans(ctx context.Context, olderThan time.Duration) (*refindex.OrphansResult, error) {
	var r *refindex.OrphansResult
	return r, q.c.Call(ctx, "Orphans", []any{olderThan}, &r)
}

func (q *Querier) Verify(ctx context.Context) (*refindex.VerifyResult, error) {
	var r *refindex.VerifyResult
	return r, q.c.Call(ctx, "Verify", nil, &r)
}

func (q *Querier) Stats(ctx context.Context) (*refindex.StatsResult, error) {
	var r *refindex.StatsResult
	return r, q.c.Call(ctx, "Stats", nil, &r)
}

func (q *Querier) Pin(ctx context.Context, path string) (*refindex.PinResult, error) {
	var r *refindex.PinResult
	return r, q.c.Call(ctx, "Pin", []any{path}, &r)
}

func (q *Querier) Unpin(ctx context.Context, path string) (*refindex.PinResult, error) {
	var r *refindex.PinResult
	return r, q.c.Call(ctx, "Unpin", []any{path}, &r)
}

func (q *Querier) History(ctx context.Context, job string) (*refindex.HistoryResult, error) {
	var r *refindex.HistoryResult
	return r, q.c.Call(ctx, "History", []any{job}, &r)
}

func (q *Querier) RestoreMetadata(ctx context.Context, checkpoint string) (*refindex.RestoreResult, error) {
	var r *refindex.RestoreResult
	return r, q.c.Call(ctx, "RestoreMetadata", []any{checkpoint}, &r)
}
