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
	// SavepointKeepNewest protects the `_metadata` of the newest savepoint of every job, whatever its
	// age (default on): someone took it to restore the job from, Flink keeps no other copy, and a
	// cleanup by age (find -mtime +7 -delete) would otherwise take a job's only savepoint.
	SavepointKeepNewest bool
	// SavepointRetention protects the `_metadata` of every savepoint completed within this period
	// (default 30 days; 0 = off). Its files stay protected by the references while it is live.
	SavepointRetention time.Duration
	// MaxStaleness refuses every decision when the last complete sync started longer ago than this
	// (0 = no limit). A mount syncs every --sync-interval, so keep it a few intervals.
	MaxStaleness time.Duration
	// Protect lists globs (path.Match syntax) whose matches and everything below them are never
	// removed. A glob without "/" matches a file or folder name at any depth ("savepoint-*" protects
	// a/b/savepoint-x and everything in it; "ha" every folder named ha); a glob with "/" matches store
	// keys from the store root ("flink/ha", "*/ha"); a leading "/" anchors a name at the root ("/ha").
	Protect []string
	// ForStPrimary lists ForSt primary dirs configured apart from the checkpoint dir
	// (state.backend.forst.primary-dir; --forst-primary): store-relative folders or URIs that map into
	// the store. Working folders <primary>/<job id>/op_…_attempt_…/ below them are protected while
	// their job is active (forst.go); those below <job>/shared/ are recognised without it.
	ForStPrimary []string `json:",omitempty"`
	// FlinkREST lists the Flink REST endpoints (--flink-rest, as flinkrest.Client.URL names them)
	// whose reports the mount installs with SetFlink. While one has never answered, every folder
	// named by a job id no answering endpoint reports is protected (flinkjobs.go).
	FlinkREST []string `json:",omitempty"`
	// Now is the clock (nil = time.Now); tests set it.
	Now func() time.Time `json:"-"`
}

// DefaultPolicy is the policy the CLI starts from.
func DefaultPolicy() Policy {
	return Policy{Grace: time.Hour, ActiveWindow: 7 * 24 * time.Hour, MaxStaleness: 5 * time.Minute,
		SavepointKeepNewest: true, SavepointRetention: 30 * 24 * time.Hour}
}

// Validate checks the globs and durations.
func (p Policy) Validate() error {
	if p.Grace < 0 || p.ActiveWindow < 0 || p.MaxStaleness < 0 || p.SavepointRetention < 0 {
		return fmt.Errorf("policy: durations must not be negative (grace %v, active window %v, max staleness %v, savepoint retention %v)", p.Grace, p.ActiveWindow, p.MaxStaleness, p.SavepointRetention)
	}
	for _, g := range p.Protect {
		if strings.Trim(g, "/") == "" {
			return fmt.Errorf("policy: --protect %q matches nothing; give a name or a path (e.g. ha, savepoint-*, flink/ha)", g)
		}
		// Store keys are clean (no ".", ".." or empty segment), so a glob that is not would match
		// nothing and protect nothing without a word.
		if t := strings.Trim(g, "/"); path.Clean(t) != t || t == "." || t == ".." || strings.HasPrefix(t, "../") {
			return fmt.Errorf("policy: --protect %q matches nothing: store keys have no \".\", \"..\" or empty segments; give a name or a path from the store root (e.g. ha, savepoint-*, flink/ha)", g)
		}
		if _, err := path.Match(strings.Trim(g, "/"), ""); err != nil {
			return fmt.Errorf("policy: --protect %q: %w", g, err)
		}
		// path.Match has no "**": it would silently match one folder level only.
		if strings.Contains(g, "**") {
			return fmt.Errorf("policy: --protect %q: \"**\" is not supported; a glob without \"/\" (e.g. \"ha\", \"savepoint-*\") already matches a name at any depth, and a match protects everything below it", g)
		}
	}
	return nil
}

// protectedBy returns the glob that protects key (it matches key or one of its ancestors), or "".
// A glob without "/" is matched against every path segment (a name at any depth); one with "/" (or
// a leading "/") against key and its ancestors from the store root.
func (p Policy) protectedBy(key string) string {
	for _, orig := range p.Protect {
		g := strings.Trim(orig, "/")
		if !strings.Contains(g, "/") && !strings.HasPrefix(orig, "/") {
			for seg := range strings.SplitSeq(key, "/") {
				if ok, _ := path.Match(g, seg); ok {
					return g
				}
			}
			continue
		}
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
