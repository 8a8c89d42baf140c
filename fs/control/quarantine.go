package control

import (
	"context"
	"log/slog"
	"reflect"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// QuarantineSocketName is the quarantine control socket's file name inside the index directory (same
// protocol and peer check as the query socket).
const QuarantineSocketName = "quarantine.sock"

// ServeQuarantine serves s (the mount's quarantine) on the socket at path.
func ServeQuarantine(path string, s quarantine.Service, log *slog.Logger) (*Server, error) {
	return Listen(path, s, reflect.TypeFor[quarantine.Service](), log)
}

// QuarantineClient is a quarantine.Service answered by a running mount.
type QuarantineClient struct{ c *Client }

var _ quarantine.Service = (*QuarantineClient)(nil)

// DialQuarantine connects to the quarantine socket at path; it fails fast when no mount serves it.
func DialQuarantine(path string) (*QuarantineClient, error) {
	c, err := Dial(path)
	if err != nil {
		return nil, err
	}
	return &QuarantineClient{c: c}, nil
}

// Close releases the client's connections.
func (q *QuarantineClient) Close() error { return q.c.Close() }

func (q *QuarantineClient) List(ctx context.Context) (*quarantine.ListResult, error) {
	var r *quarantine.ListResult
	return r, q.c.Call(ctx, "List", nil, &r)
}

func (q *QuarantineClient) Restore(ctx context.Context, ids []string) (*quarantine.RestoreResult, error) {
	var r *quarantine.RestoreResult
	return r, q.c.Call(ctx, "Restore", []any{ids}, &r)
}

func (q *QuarantineClient) Purge(ctx context.Context, ids []string) (*quarantine.PurgeResult, error) {
	var r *quarantine.PurgeResult
	return r, q.c.Call(ctx, "Purge", []any{ids}, &r)
}

func (q *QuarantineClient) PurgeWith(ctx context.Context, req quarantine.PurgeRequest) (*quarantine.PurgeResult, error) {
	var r *quarantine.PurgeResult
	return r, q.c.Call(ctx, "PurgeWith", []any{req}, &r)
}
