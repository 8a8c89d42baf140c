// Package guardtest provides an in-memory guard.Checker for unit tests of guarded filesystems.
package guardtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Checker refuses every operation on a protected key and on directories holding one; it records every
// notification. The zero value is not usable; call New.
type Checker struct {
	mu        sync.Mutex
	protected map[string][]string // key -> referencing checkpoints
	Calls     []string            // "deleted x", "written x", "renamed x y", in order
	// WrittenHook, if set, runs inside Written (for example to protect what a new _metadata references).
	WrittenHook func(key string) error
	// DecideHook, if set, runs at the start of every Decide, outside the lock (for example to change the
	// store between a decision and the operation it allows, to test races).
	DecideHook func(key string, op verdict.Op)
}

var _ guard.Checker = (*Checker)(nil)

// New returns a Checker protecting nothing.
func New() *Checker { return &Checker{protected: map[string][]string{}} }

// Protect marks key as referenced by the given checkpoints.
func (c *Checker) Protect(key string, by ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(by) == 0 {
		by = []string{"test"}
	}
	c.protected[key] = by
}

// Unprotect drops key's protection.
func (c *Checker) Unprotect(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.protected, key)
}

func (c *Checker) refs(key string) []string {
	if r, ok := c.protected[key]; ok {
		return r
	}
	prefix := key + "/"
	if key == "" {
		prefix = ""
	}
	for k, r := range c.protected {
		if strings.HasPrefix(k, prefix) {
			return r
		}
	}
	return nil
}

// Decide implements guard.Checker.
func (c *Checker) Decide(ctx context.Context, key string, op verdict.Op) verdict.Decision {
	c.mu.Lock()
	hook := c.DecideHook
	c.mu.Unlock()
	if hook != nil {
		hook(key, op)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.refs(key); r != nil {
		return verdict.Decision{Reason: verdict.ReasonReferenced, Referencing: r, RefCount: len(r),
			Message: fmt.Sprintf("%s is referenced by %s", key, strings.Join(r, ", "))}
	}
	return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed}
}

// Deleted implements guard.Checker.
func (c *Checker) Deleted(ctx context.Context, key string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Calls = append(c.Calls, "deleted "+key)
	return nil
}

// Written implements guard.Checker.
func (c *Checker) Written(ctx context.Context, key string) error {
	c.mu.Lock()
	c.Calls = append(c.Calls, "written "+key)
	hook := c.WrittenHook
	c.mu.Unlock()
	if hook != nil {
		return hook(key)
	}
	return nil
}

// Renamed implements guard.Checker.
func (c *Checker) Renamed(ctx context.Context, from, to string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Calls = append(c.Calls, "renamed "+from+" "+to)
	return nil
}

// Explain implements guard.Checker.
func (c *Checker) Explain(ctx context.Context, key string) (string, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if r := c.refs(key); r != nil {
		return "referenced", r, nil
	}
	return "deletable", nil, nil
}

// CallLog returns a copy of the notifications so far.
func (c *Checker) CallLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.Calls...)
}
