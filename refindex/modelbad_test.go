package refindex_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"pgregory.net/rapid"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// Bad entries in the model (issue 29): "a bad entry appears / disappears". A bad entry is a damaged
// `_metadata` (random bytes, written by another user into a scratch folder) or a subtree the store
// cannot read (modelDarkStore reports it as an unknown subtree, as an unreadable folder or a failing
// listing would be). The model's rule for them:
//   - appearing, a damaged `_metadata` changes no decision but its own (it protects nothing but
//     itself); an unreadable subtree (outside any job folder, read at the sync before) refuses
//     everything in it and, outside it, nothing when it is owned by a user who wrote no `_metadata`
//     (confined), else only what the tombstone scope explains (a file whose last reference was
//     retired since the subtree was last read: reason unknown-subtree, "retired after");
//   - Flink's own deletions (subsumption and its cleanup) and a script's deletion of garbage are refused only with reason
//     unknown-subtree while an unconfined unreadable subtree exists (what it may hide is unknown:
//     the fail-closed cost, in its smallest scope), never for a damaged `_metadata` or a confined one;
//   - disappearing, it is gone from stats after the next sync and refuses nothing any more;
//   - at every step the model's safety invariants hold, bad entries or not.

// modelDarkStore is a local store that cannot read the subtrees in dark: its listings leave out what lies
// below them and report each as an unknown subtree.
type modelDarkStore struct {
	*localstore.Store
	mu   sync.Mutex
	dark map[string]bool // key → owned by darkUID (else reported without an owner)
}

// darkUID owns the unreadable subtrees reported with an owner: a user who writes no `_metadata`, so
// they are confined (they protect only themselves).
const darkUID = 4242

// unconfined reports whether a subtree without an owner is unreadable: it refuses beyond itself.
func (s *modelDarkStore) unconfined() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, owned := range s.dark {
		if !owned {
			return true
		}
	}
	return false
}

var errModelDark = errors.New("permission denied (model: unreadable subtree)")

func (s *modelDarkStore) darkOf(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	for d := range s.dark {
		if key == d || strings.HasPrefix(key, d+"/") {
			return d
		}
	}
	return ""
}

func (s *modelDarkStore) report(ctx context.Context, prefix string) error {
	s.mu.Lock()
	var us []store.UnknownSubtree
	for d, owned := range s.dark {
		if prefix == "" || d == prefix || strings.HasPrefix(d, prefix+"/") {
			us = append(us, store.UnknownSubtree{Key: d, Err: errModelDark, UID: darkUID, HasUID: owned})
		}
	}
	s.mu.Unlock()
	for _, u := range us {
		if err := store.ReportUnknown(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

func (s *modelDarkStore) Walk(ctx context.Context, prefix string, fn func(store.ObjectInfo) error) error {
	if err := s.Store.Walk(ctx, prefix, func(oi store.ObjectInfo) error {
		if s.darkOf(oi.Path) != "" {
			return nil
		}
		return fn(oi)
	}); err != nil {
		return err
	}
	return s.report(ctx, prefix)
}

func (s *modelDarkStore) ListMetadata(ctx context.Context, fn func(store.ObjectInfo) error) error {
	if err := s.Store.ListMetadata(ctx, func(oi store.ObjectInfo) error {
		if s.darkOf(oi.Path) != "" {
			return nil
		}
		return fn(oi)
	}); err != nil {
		return err
	}
	return s.report(ctx, "")
}

func (s *modelDarkStore) setDark(key string, on, owned bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.dark == nil {
		s.dark = map[string]bool{}
	}
	if on {
		s.dark[key] = owned
	} else {
		delete(s.dark, key)
	}
}

// badAppears is the model operation "a bad entry appears".
func (m *model) badAppears(t *rapid.T) {
	ctx := context.Background()
	if err := m.ix.Sync(ctx); err != nil { // the subtree is read once before it goes dark
		t.Fatal(err)
	}
	m.badSeq++
	damaged := rapid.Bool().Draw(t, "damaged")
	var key, inside string
	if damaged {
		key = fmt.Sprintf("scratch/bad-%d/chk-1/_metadata", m.badSeq)
		body := rapid.SliceOfN(rapid.Byte(), 0, 64).Draw(t, "bytes")
		if err := m.tr.WriteBytes(key, body, m.now); err != nil {
			t.Fatal(err)
		}
		if os.Geteuid() == 0 {
			os.Lchown(filepath.Join(m.tr.Root, key), foreignUID, foreignUID)
		}
	} else {
		key = fmt.Sprintf("scratch/dark-%d", m.badSeq)
		inside = key + "/f"
		if err := m.tr.Write(inside, 10, m.now.Add(-30*24*60*60e9)); err != nil {
			t.Fatal(err)
		}
		if err := m.ix.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	before := map[string]bool{}
	files := m.tr.AllFiles()
	for _, k := range files {
		before[k] = m.ix.Decide(ctx, k, verdict.OpUnlink).Allow
	}
	owned := false
	if !damaged {
		owned = rapid.Bool().Draw(t, "owned-by-another-user")
		m.st.setDark(key, true, owned)
	}
	if err := m.ix.Sync(ctx); err != nil {
		t.Fatalf("sync with the bad entry %s: %v", key, err)
	}
	m.bad[key] = damaged
	for _, k := range files {
		if k == key || !before[k] {
			continue
		}
		d := m.ix.Decide(ctx, k, verdict.OpUnlink)
		switch {
		case d.Allow:
		case !damaged && strings.HasPrefix(k, key+"/"):
		case !damaged && !owned && d.Reason == verdict.ReasonUnknownSubtree && strings.Contains(d.Message, "retired after"):
		default:
			t.Fatalf("the bad entry %s (damaged %v) refuses the unrelated %s, allowed before: %+v", key, damaged, k, d)
		}
	}
	if !damaged {
		if d := m.ix.Decide(ctx, inside, verdict.OpUnlink); d.Allow {
			t.Fatalf("%s inside the unreadable %s: %+v", inside, key, d)
		}
		if d := m.ix.Decide(ctx, "scratch", verdict.OpRmdir); d.Allow {
			t.Fatalf("rmdir of scratch, which holds the unreadable %s: %+v", key, d)
		}
	}
	m.checkBadListed(t)
}

// badDisappears is the model operation "a bad entry disappears": the damaged file is removed beside
// the mount, the unreadable subtree becomes readable.
func (m *model) badDisappears(t *rapid.T) {
	var keys []string
	for k := range m.bad {
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		t.Skip("no bad entry")
	}
	sort.Strings(keys)
	key := rapid.SampledFrom(keys).Draw(t, "bad")
	ctx := context.Background()
	if m.bad[key] {
		os.Remove(filepath.Join(m.tr.Root, key))
		delete(m.tr.Files, key)
	} else {
		m.st.setDark(key, false, false)
	}
	delete(m.bad, key)
	if err := m.ix.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	m.checkBadListed(t)
	if !strings.HasSuffix(key, "/_metadata") {
		if d := m.ix.Decide(ctx, key+"/f", verdict.OpUnlink); d.Reason == verdict.ReasonUnknownSubtree && len(d.Referencing) > 0 && d.Referencing[0] == key {
			t.Fatalf("%s readable again still refused as unknown: %+v", key, d)
		}
	}
}

// checkBadListed: stats lists exactly the model's bad entries still in the store (a damaged file a
// script deleted through the index is gone from both).
func (m *model) checkBadListed(t *rapid.T) {
	s, err := m.ix.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, b := range s.BadMetadata {
		listed[b.Metadata] = true
	}
	for _, u := range s.UnknownSubtrees {
		listed[u.Key] = true
	}
	for k, damaged := range m.bad {
		if _, ok := m.tr.Files[k]; damaged && !ok {
			delete(m.bad, k)
			continue
		}
		if !listed[k] {
			t.Fatalf("the bad entry %s is not in stats: %+v %+v", k, s.BadMetadata, s.UnknownSubtrees)
		}
		delete(listed, k)
	}
	for k := range listed {
		if strings.HasPrefix(k, "scratch/") {
			t.Fatalf("stats lists %s, no bad entry of the model any more", k)
		}
	}
}

// flinkRefusedByBad reports whether d, a refusal of one of Flink's own deletions, is what the model
// allows bad entries to cause: unknown-subtree while an unconfined unreadable subtree exists.
func (m *model) flinkRefusedByBad(d verdict.Decision) bool {
	return !d.Allow && d.Reason == verdict.ReasonUnknownSubtree && m.st.unconfined()
}

// badExcuses reports whether the refusal d of deleting the garbage k is one the bad entries explain:
// k lies in an unreadable subtree, or an unconfined one exists (reason unknown-subtree either way).
func (m *model) badExcuses(k string, d verdict.Decision) bool {
	return d.Reason == verdict.ReasonUnknownSubtree && (m.st.darkOf(k) != "" || m.st.unconfined())
}
