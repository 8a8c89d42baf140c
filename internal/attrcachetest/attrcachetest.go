// Package attrcachetest is the one property test of the mounts' attribute caches (the S3 mount's
// s3client.AttrCache, the HDFS mount's listing-page cache): random sequences of answers, changes and
// questions, checked against a reference model of what a cache may answer.
//
// The model: a cache remembers what listings and HEADs said about a key, each answer stamped with the
// start of its request. A question with a bound on age (Get, maxAge) gets the freshest answer stamped
// after the mount's last change of the key (Changed) and of every folder above it or the key itself
// removed or renamed as a tree (ChangedTree), if that answer is at most maxAge old; a reply sent before
// a change, however late it arrives, never answers again. A cache bounded below what the sequence
// holds may forget (miss), never answer otherwise.
//
// Stamps are drawn so the model is exact whatever the machine's speed: a late reply is stamped just
// before the reading taken before an earlier change (so before the cache's own stamp of it), a fresh
// one after the reading taken after the last change; the age of an answer is judged from readings
// taken before and after each question, and a question whose bound falls between them accepts either
// answer.
package attrcachetest

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// Cache is an attribute cache as the suite drives it. Keys are "/"-separated, relative to the mount.
type Cache interface {
	// Listed records that a listing (or HEAD) whose request started at `at` showed key, a file of size.
	Listed(key string, size int64, at time.Time)
	// Changed records that the mount changed key itself (unlink, write, create, ...).
	Changed(key string)
	// ChangedTree records that the mount removed or renamed key with everything below it.
	ChangedTree(key string)
	// Get is the cache's answer for key at most maxAge old: the size it remembers, or ok false.
	Get(key string, maxAge time.Duration) (size int64, ok bool)
}

// Harness is a cache kind.
type Harness struct {
	// New returns an empty cache bounded to about max entries.
	New func(max int) Cache
	// MaxAge is the longest age the cache's callers accept (an eviction may forget anything older).
	MaxAge time.Duration
}

// Run checks the model on sequences of ops: with a bound the sequences never reach (every question
// answered exactly as the model says), and with a small bound (misses allowed, wrong answers not).
func Run(t *testing.T, h Harness) {
	for _, bound := range []struct {
		name string
		max  int
	}{{"unbounded", 1 << 20}, {"bounded", 4}} {
		t.Run(bound.name, func(t *testing.T) {
			for seed := range uint64(300) {
				run(t, h, bound.max, bound.max < 1<<20, seed)
				if t.Failed() {
					return
				}
			}
		})
	}
}

var keys = []string{"a", "b", "x", "a/a", "a/b", "a/x", "a/b/a", "a/b/b", "a/b/x"}

// answer is one reply the model holds.
type answer struct {
	size int64
	at   time.Time
}

// model is the reference: every answer given per key, and the changes with the readings around them.
type model struct {
	answers map[string][]answer
	changes map[string]time.Time // key -> reading before its last change (the cache's stamp is later)
	trees   map[string]time.Time // key -> reading before its last change as a tree
	events  []time.Time          // readings before each change so far
	spans   [][2]time.Time       // readings before and after each change: the cache's stamp is inside
	last    time.Time            // reading after the last op
}

// visible is the freshest answer for key given after its last change and those of the trees above it.
func (m *model) visible(key string) (answer, bool) {
	var after time.Time
	if c, ok := m.changes[key]; ok {
		after = c
	}
	for k := key; ; {
		if c, ok := m.trees[k]; ok && c.After(after) {
			after = c
		}
		i := strings.LastIndexByte(k, '/')
		if i < 0 {
			break
		}
		k = k[:i]
	}
	var best answer
	found := false
	for _, a := range m.answers[key] {
		if a.at.After(after) && (!found || !a.at.Before(best.at)) {
			best, found = a, true
		}
	}
	return best, found
}

// outside moves at before a change whose span holds it (a test stalled for MaxAge/2 between ops): the
// model cannot tell which side of the cache's own stamp it falls.
func (m *model) outside(at time.Time) time.Time {
	for _, sp := range m.spans {
		if !at.Before(sp[0]) && !at.After(sp[1]) {
			at = sp[0].Add(-time.Nanosecond)
		}
	}
	return at
}

func run(t *testing.T, h Harness, max int, mayForget bool, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 33))
	c := h.New(max)
	m := &model{answers: map[string][]answer{}, changes: map[string]time.Time{}, trees: map[string]time.Time{}, last: time.Now()}
	var log []string
	fail := func(format string, args ...any) {
		t.Helper()
		t.Errorf("seed %d (bound %d): "+format+"\nops:\n  %s", append(append([]any{seed, max}, args...), strings.Join(log, "\n  "))...)
	}
	var size int64
	for range 60 {
		key := keys[r.IntN(len(keys))]
		switch op := r.IntN(10); {
		case op < 4: // a listing's answer
			size++
			var at time.Time
			var kind string
			switch s := r.IntN(4); {
			case s == 0 && len(m.events) > 0: // a reply sent before an earlier change, arriving now
				at, kind = m.events[r.IntN(len(m.events))].Add(-time.Nanosecond), "late"
			case s == 1:
				at, kind = m.outside(time.Now().Add(-h.MaxAge/2)), "old"
			case s == 2:
				at, kind = m.outside(time.Now().Add(-2*h.MaxAge)), "expired"
			default:
				for at = time.Now(); !at.After(m.last); at = time.Now() {
				}
				kind = "fresh"
			}
			c.Listed(key, size, at)
			m.answers[key] = append(m.answers[key], answer{size, at})
			log = append(log, fmt.Sprintf("listed %s size %d (%s)", key, size, kind))
		case op < 6:
			before := time.Now()
			c.Changed(key)
			m.changes[key], m.events = before, append(m.events, before)
			m.spans = append(m.spans, [2]time.Time{before, time.Now()})
			log = append(log, "changed "+key)
		case op < 7:
			before := time.Now()
			c.ChangedTree(key)
			m.trees[key], m.events = before, append(m.events, before)
			m.spans = append(m.spans, [2]time.Time{before, time.Now()})
			log = append(log, "changed tree "+key)
		default:
			maxAge := h.MaxAge
			if r.IntN(2) == 0 {
				maxAge = h.MaxAge / 4
			}
			t0 := time.Now()
			got, ok := c.Get(key, maxAge)
			t1 := time.Now()
			want, has := m.visible(key)
			log = append(log, fmt.Sprintf("get %s within %v: %d %v", key, maxAge, got, ok))
			switch {
			case ok && (!has || got != want.size):
				fail("get %s within %v answered size %d; the model's answer: %+v (exists %v)", key, maxAge, got, want, has)
			case ok && t0.Sub(want.at) > maxAge:
				fail("get %s within %v answered size %d, older than %v", key, maxAge, got, maxAge)
			case !ok && has && t1.Sub(want.at) <= maxAge && !mayForget:
				fail("get %s within %v missed; the model's answer: size %d, %v old", key, maxAge, want.size, t1.Sub(want.at))
			}
		}
		m.last = time.Now()
	}
}
