package quarantinetest

import (
	"errors"
	"fmt"
	"sync"
)

// ErrCrashed is what a Crasher returns for every change it refuses.
var ErrCrashed = errors.New("crashed (quarantinetest.Crasher)")

// Crasher is the crash of a Store whose client can be wrapped (S3, HDFS): the wrapper asks Change
// before each change it passes to the store (a put, copy, delete, create, rename, mkdir). Once armed
// with n, the first n changes pass and every later one is refused, as a process killed right before
// it would never make it.
type Crasher struct {
	mu    sync.Mutex
	armed bool
	left  int
	hit   bool
}

// Arm lets the next n changes pass and refuses the ones after them.
func (c *Crasher) Arm(n int) {
	c.mu.Lock()
	c.armed, c.left = true, n
	c.mu.Unlock()
}

// Change reports whether the change op of name may pass (nil) or is refused (ErrCrashed).
func (c *Crasher) Change(op, name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.armed {
		return nil
	}
	if c.left == 0 {
		c.hit = true
		return fmt.Errorf("%s %s: %w", op, name, ErrCrashed)
	}
	c.left--
	return nil
}

// Crashed reports whether a change was refused (Store.Crash's answer).
func (c *Crasher) Crashed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hit
}
