// Package guardtest provides the in-memory guard.Checker every test of a guarded filesystem uses: the unit
// tests of fs/guard, the mounts' own tests and the mount contract suite (fs/guard/mounttest).
package guardtest

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/ckguard/ckguard/fs/guard"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Checker refuses every operation on a protected key and on directories holding one (ReasonReferenced),
// and every operation on a young key (ReasonGrace, as an in-flight file); it allows the rest. It records
// every decision asked and every notification. The zero value is not usable; call New.
type Checker struct {
	mu        sync.Mutex
	protected map[string][]string // key -> referencing checkpoints
	young     map[string]bool     // keys refused for grace
	decisions []string            // "unlink x", in order
	// Calls holds the notifications: "deleted x", "written x", "renamed x y", in order. Read it with
	// CallLog: the mount appends to it from its own goroutines.
	Calls []string
	// WrittenHook, if set, runs inside Written (for example to protect what a new _metadata references).
	// Set it with SetWrittenHook once the mount serves.
	WrittenHook func(key string) error
	// DecideHook, if set, runs at the start of every Decide, outside the lock (for example to change the
	// store between a decision and the operation it allows, to test races). Set it with SetDecideHook
	// once the mount serves.
	DecideHook func(key string, op verdict.Op)
}

var _ guard.Checker = (*Checker)(nil)

// New returns a Checker protecting nothing.
func New() *Checker { return &Checker{protected: map[string][]string{}, young: map[string]bool{}} }

// Protect marks key as referenced by the given checkpoints ("test" when none is given).
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

// Young marks key as in grace: unreferenced, but too young to delete (a file of a checkpoint in flight).
func (c *Checker) Young(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.young[key] = true
}

// SetDecideHook sets DecideHook under the Checker's lock, ordered with every Decide of the mount's
// goroutines (the kernel round trip between a test and the FUSE server is invisible to the race detector).
func (c *Checker) SetDecideHook(f func(key string, op verdict.Op)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.DecideHook = f
}

// SetWrittenHook sets WrittenHook under the Checker's lock (see SetDecideHook).
func (c *Checker) SetWrittenHook(f func(key string) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.WrittenHook = f
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
func (c *Checker) Decide(ctx context.Context, key string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	c.mu.Lock()
	c.decisions = append(c.decisions, op.String()+" "+key)
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
	if c.young[key] {
		return verdict.Decision{Reason: verdict.ReasonGrace, Message: key + " is younger than the grace period"}
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
	if c.young[key] {
		return "in-grace", nil, nil
	}
	return "deletable", nil, nil
}

// CallLog returns a copy of the notifications so far.
func (c *Checker) CallLog() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.Calls...)
}

// Decisions returns a copy of the decisions asked so far, as "op key" ("unlink job/shared/a").
func (c *Checker) Decisions() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.decisions...)
}
