// Package sharedtest is the conformance suite every shared.CAS implementation passes (Run, from the
// implementation's tests over a real store), and Mem, an in-memory CAS with injected faults for the
// model test of the protocol.
package sharedtest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
)

// Fault is what Mem does with one Put.
type Fault int

const (
	OK          Fault = iota
	FailBefore        // error, nothing written (a 503 the server answered)
	FailApplied       // written, then an error (a 503 after the commit, a lost reply)
	FailLate          // an error now, written later if still conditional-true (a request still in flight after the client's timeout)
)

// Mem is an in-memory CAS. Faults, when set, decides each Put's fault.
type Mem struct {
	mu     sync.Mutex
	recs   map[string]memRec
	Faults func() Fault
	late   sync.WaitGroup
	Puts   int // Put calls
}

type memRec struct {
	data []byte
	ver  int
}

// NewMem returns an empty Mem.
func NewMem() *Mem { return &Mem{recs: map[string]memRec{}} }

// Where implements shared.CAS.
func (m *Mem) Where() string { return "mem:" }

// Settle waits for the late writes in flight.
func (m *Mem) Settle() { m.late.Wait() }

// Get implements shared.CAS.
func (m *Mem) Get(ctx context.Context, name string) ([]byte, string, error) {
	runtime.Gosched()
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[name]
	if !ok {
		return nil, "", fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	return slices.Clone(r.data), strconv.Itoa(r.ver), nil
}

func (m *Mem) apply(name string, data []byte, prev string) (string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r, ok := m.recs[name]
	if prev == "" && ok || prev != "" && (!ok || strconv.Itoa(r.ver) != prev) {
		return "", shared.ErrConflict
	}
	r = memRec{data: slices.Clone(data), ver: r.ver + 1}
	m.recs[name] = r
	return strconv.Itoa(r.ver), nil
}

// Put implements shared.CAS.
func (m *Mem) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	runtime.Gosched()
	f := OK
	m.mu.Lock()
	m.Puts++
	if m.Faults != nil {
		f = m.Faults()
	}
	m.mu.Unlock()
	injected := errors.New("injected: outcome unknown")
	switch f {
	case FailBefore:
		return "", injected
	case FailApplied:
		_, _ = m.apply(name, data, prev)
		return "", injected
	case FailLate:
		m.late.Add(1)
		go func() {
			defer m.late.Done()
			time.Sleep(time.Duration(rand.IntN(3)) * time.Millisecond)
			_, _ = m.apply(name, data, prev)
		}()
		return "", injected
	}
	return m.apply(name, data, prev)
}

// List implements shared.CAS.
func (m *Mem) List(ctx context.Context, prefix string) ([]shared.Entry, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var out []shared.Entry
	for n, r := range m.recs {
		if len(n) >= len(prefix) && n[:len(prefix)] == prefix {
			out = append(out, shared.Entry{Name: n, Version: strconv.Itoa(r.ver)})
		}
	}
	return out, nil
}

// Run runs the conformance suite on the CAS that open returns (a fresh, empty area each call).
func Run(t *testing.T, open func(t *testing.T) shared.CAS) {
	ctx := context.Background()
	t.Run("CreateOnce", func(t *testing.T) {
		c := open(t)
		if _, _, err := c.Get(ctx, "a/b"); !errors.Is(err, fs.ErrNotExist) {
			t.Fatalf("Get of a missing record: %v, want fs.ErrNotExist", err)
		}
		v1, err := c.Put(ctx, "a/b", []byte("one"), "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Put(ctx, "a/b", []byte("two"), ""); !errors.Is(err, shared.ErrConflict) {
			t.Fatalf("second create: %v, want ErrConflict", err)
		}
		b, v, err := c.Get(ctx, "a/b")
		if err != nil || string(b) != "one" || v != v1 {
			t.Fatalf("Get = %q %q %v, want one %q", b, v, err, v1)
		}
	})
	t.Run("ReplaceConditional", func(t *testing.T) {
		c := open(t)
		v1, err := c.Put(ctx, "r", []byte("1"), "")
		if err != nil {
			t.Fatal(err)
		}
		v2, err := c.Put(ctx, "r", []byte("2"), v1)
		if err != nil {
			t.Fatal(err)
		}
		if v2 == v1 {
			t.Fatalf("a replace kept the version %q", v1)
		}
		if _, err := c.Put(ctx, "r", []byte("stale"), v1); !errors.Is(err, shared.ErrConflict) {
			t.Fatalf("replace on a stale version: %v, want ErrConflict", err)
		}
		b, v, err := c.Get(ctx, "r")
		if err != nil || string(b) != "2" || v != v2 {
			t.Fatalf("Get = %q %q %v, want 2 %q", b, v, err, v2)
		}
	})
	t.Run("List", func(t *testing.T) {
		c := open(t)
		for _, n := range []string{"pins/x", "pins/y", "mounts/h1", "pinsx"} {
			if _, err := c.Put(ctx, n, []byte(n), ""); err != nil {
				t.Fatal(err)
			}
		}
		es, err := c.List(ctx, "pins/")
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, e := range es {
			names = append(names, e.Name)
			if _, v, err := c.Get(ctx, e.Name); err != nil || v != e.Version {
				t.Errorf("%s: listed version %q, Get says %q (%v)", e.Name, e.Version, v, err)
			}
		}
		slices.Sort(names)
		if !slices.Equal(names, []string{"pins/x", "pins/y"}) {
			t.Fatalf("List(pins/) = %v", names)
		}
	})
	t.Run("ConcurrentUpdates", func(t *testing.T) {
		c := open(t)
		CheckUpdates(t, c, 4, 8)
	})
}

// CheckUpdates runs writers×each Updates appending one id each to one record concurrently and
// checks that every Update that succeeded is in the record exactly once and every other at most once.
func CheckUpdates(t *testing.T, c shared.CAS, writers, each int) {
	t.Helper()
	problems, failed, err := RunUpdates(c, writers, each)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
	if failed > 0 {
		t.Logf("%d of %d updates reported failed (outcome unknown)", failed, writers*each)
	}
}

// RunUpdates is CheckUpdates' run: it returns the updates lost or applied twice, and how many
// Updates reported an error.
func RunUpdates(c shared.CAS, writers, each int) (problems []string, failed int, err error) {
	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	ok := map[string]bool{}
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				id := fmt.Sprintf("w%d-%d", w, i)
				_, err := shared.Update(ctx, c, "model/counter", shared.UpdateOptions{Attempts: 50, Backoff: time.Millisecond}, func(cur []byte, exists bool) ([]byte, error) {
					var ids []string
					if exists {
						if err := json.Unmarshal(cur, &ids); err != nil {
							return nil, err
						}
					}
					return json.Marshal(append(ids, id))
				})
				mu.Lock()
				ok[id] = err == nil
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if s, isSettler := c.(interface{ Settle() }); isSettler {
		s.Settle()
	}
	data, _, err := shared.Read(ctx, c, "model/counter")
	if err != nil {
		return nil, 0, err
	}
	var ids []string
	if err := json.Unmarshal(data, &ids); err != nil {
		return nil, 0, err
	}
	count := map[string]int{}
	for _, id := range ids {
		count[id]++
	}
	for id, succeeded := range ok {
		switch {
		case count[id] > 1:
			problems = append(problems, fmt.Sprintf("update %s applied %d times", id, count[id]))
		case succeeded && count[id] == 0:
			problems = append(problems, fmt.Sprintf("update %s reported applied but lost", id))
		case !succeeded:
			failed++
		}
	}
	slices.Sort(problems)
	return problems, failed, nil
}
