package refindex

import (
	"fmt"
	"path"
	"strings"
	"time"
)

// Policy is what a decision depends on besides the references.
type Policy struct {
	// Grace protects unreferenced objects younger than this (default 1h): they may belong to a
	// checkpoint whose `_metadata` is not written yet. Use at least the checkpoint timeout.
	Grace time.Duration
	// ActiveWindow protects the newest checkpoint `_metadata` of every job whose newest checkpoint
	// completed within this window (default 7 days): the job may restart from it.
	ActiveWindow time.Duration
	// MaxStaleness refuses every decision when the last complete sync started longer ago than this
	// (0 = no limit). A mount syncs every --sync-interval, so keep it a few intervals.
	MaxStaleness time.Duration
	// Protect lists globs (path.Match syntax on store keys) whose matches and everything below them
	// are never removed, e.g. "ha" or "*/ha" for the HA storage folder.
	Protect []string
	// Now is the clock (nil = time.Now); tests set it.
	Now func() time.Time `json:"-"`
}

// DefaultPolicy is the policy the CLI starts from.
func DefaultPolicy() Policy {
	return Policy{Grace: time.Hour, ActiveWindow: 7 * 24 * time.Hour, MaxStaleness: 5 * time.Minute}
}

// Validate checks the globs and durations.
func (p Policy) Validate() error {
	if p.Grace < 0 || p.ActiveWindow < 0 || p.MaxStaleness < 0 {
		return fmt.Errorf("policy: durations must not be negative (grace %v, active window %v, max staleness %v)", p.Grace, p.ActiveWindow, p.MaxStaleness)
	}
	for _, g := range p.Protect {
		if _, err := path.Match(strings.Trim(g, "/"), ""); err != nil {
			return fmt.Errorf("policy: --protect %q: %w", g, err)
		}
		// path.Match has no "**": it would silently match one folder level only.
		if strings.Contains(g, "**") {
			return fmt.Errorf("policy: --protect %q: \"**\" is not supported; \"*\" matches one path segment and a match protects everything below it, so give one glob per depth (e.g. \"ha\" and \"*/ha\")", g)
		}
	}
	return nil
}

// protectedBy returns the glob that protects key (it matches key or one of its ancestors), or "".
func (p Policy) protectedBy(key string) string {
	for _, g := range p.Protect {
		g = strings.Trim(g, "/")
		k := key
		for {
			if ok, _ := path.Match(g, k); ok {
				return g
			}
			i := strings.LastIndexByte(k, '/')
			if i < 0 {
				break
			}
			k = k[:i]
		}
	}
	return ""
}
