package shared_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/shared"
	"github.com/ckguard/ckguard/refindex/store/shared/sharedtest"
)

// TestCASModel: random interleavings of N writers over a CAS whose writes fail before, after or
// late (applied after the error was returned), seed by seed: no update lost, none applied twice.
func TestCASModel(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 8
	}
	for seed := range seeds {
		m := sharedtest.NewMem()
		var mu sync.Mutex
		r := rand.New(rand.NewPCG(uint64(seed), 7))
		m.Faults = func() sharedtest.Fault {
			mu.Lock()
			defer mu.Unlock()
			switch x := r.IntN(10); {
			case x < 1:
				return sharedtest.FailBefore
			case x < 2:
				return sharedtest.FailApplied
			case x < 3:
				return sharedtest.FailLate
			}
			return sharedtest.OK
		}
		sharedtest.CheckUpdates(t, m, 2+seed%5, 10)
		if t.Failed() {
			t.Fatalf("seed %d", seed)
		}
	}
}

// TestCASModelDetectsBlindWrites: the checker fails a CAS that writes without its condition, and a
// protocol that retries an unknown outcome without looking for its write id, so the model can fail.
func TestCASModelDetectsBlindWrites(t *testing.T) {
	m := sharedtest.NewMem()
	problems, _, err := sharedtest.RunUpdates(blindCAS{m}, 4, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("blind writes lost no update: the model cannot see a lost update")
	}
	t.Logf("blind writes: %d problems, first %s", len(problems), problems[0])

	m = sharedtest.NewMem()
	forget := forgetfulCAS{Mem: m}
	problems, _, err = sharedtest.RunUpdates(&forget, 1, 5)
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) == 0 {
		t.Fatal("retries without write ids applied nothing twice: the model cannot see a doubled update")
	}
}

// blindCAS ignores the condition: it writes on whatever version is current.
type blindCAS struct{ *sharedtest.Mem }

func (b blindCAS) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	time.Sleep(time.Millisecond) // widen the read-to-write window
	_, cur, err := b.Mem.Get(ctx, name)
	if err != nil {
		cur = ""
	}
	return b.Mem.Put(ctx, name, data, cur)
}

// forgetfulCAS answers every applied write with an error once, and strips the write ids and the
// write count from what it returns, as a protocol without them would see the record.
type forgetfulCAS struct {
	*sharedtest.Mem
	n int
}

func (f *forgetfulCAS) Get(ctx context.Context, name string) ([]byte, string, error) {
	b, v, err := f.Mem.Get(ctx, name)
	if err != nil {
		return b, v, err
	}
	var env shared.Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, "", err
	}
	env.Writes, env.Seq = nil, 0
	b, _ = json.Marshal(env)
	return b, v, nil
}

func (f *forgetfulCAS) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	f.n++
	v, err := f.Mem.Put(ctx, name, data, prev)
	if err == nil && f.n%2 == 1 {
		return "", errors.New("applied, answered with an error")
	}
	return v, err
}

func TestLocalConformance(t *testing.T) {
	sharedtest.Run(t, func(t *testing.T) shared.CAS {
		l, err := shared.NewLocal(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		return l
	})
}

// TestHeartbeaterOnePutAtRest: after its first beat a Heartbeater writes with one Put per beat, and
// falls back to a read when someone else moved its record.
func TestHeartbeaterOnePutAtRest(t *testing.T) {
	ctx := context.Background()
	m := sharedtest.NewMem()
	h := shared.NewHeartbeater(m)
	rec := shared.Mount{ID: "h-1", Host: "h"}
	for i := range 5 {
		rec.Refusals1h = int64(i)
		if err := h.Beat(ctx, rec); err != nil {
			t.Fatal(err)
		}
	}
	if m.Puts != 5 {
		t.Errorf("%d Puts for 5 beats, want 5", m.Puts)
	}
	// Someone else rewrites the record: the next beat conflicts once, reads and writes.
	if _, err := shared.Heartbeat(ctx, m, shared.Mount{ID: "h-1", Host: "other"}); err != nil {
		t.Fatal(err)
	}
	if err := h.Beat(ctx, rec); err != nil {
		t.Fatal(err)
	}
	ms, err := shared.Mounts(ctx, m)
	if err != nil || len(ms) != 1 || ms[0].Host != "h" || ms[0].Refusals1h != 4 {
		t.Fatalf("registry = %+v %v", ms, err)
	}
}

// burstCAS applies the first write, lets burst run (other writers' Updates), then answers that first
// write with an error: its write id is pushed out of the record's last keepWrites meanwhile.
type burstCAS struct {
	*sharedtest.Mem
	done  bool
	burst func()
}

func (b *burstCAS) Put(ctx context.Context, name string, data []byte, prev string) (string, error) {
	v, err := b.Mem.Put(ctx, name, data, prev)
	if err == nil && !b.done {
		b.done = true
		b.burst()
		return "", errors.New("applied, answer lost")
	}
	return v, err
}

// TestUpdateUnknownAfterManyWrites: an Update whose applied write was answered with an error, and
// followed by more writes than the record keeps ids of, reports its outcome unknown instead of
// writing again (which would apply it twice).
func TestUpdateUnknownAfterManyWrites(t *testing.T) {
	ctx := context.Background()
	m := sharedtest.NewMem()
	add := func(c shared.CAS, id string) error {
		_, err := shared.Update(ctx, c, "model/counter", shared.UpdateOptions{Backoff: time.Millisecond}, func(cur []byte, exists bool) ([]byte, error) {
			var ids []string
			if exists {
				if err := json.Unmarshal(cur, &ids); err != nil {
					return nil, err
				}
			}
			return json.Marshal(append(ids, id))
		})
		return err
	}
	b := &burstCAS{Mem: m, burst: func() {
		for i := range 40 {
			if err := add(m, fmt.Sprintf("other-%d", i)); err != nil {
				t.Fatal(err)
			}
		}
	}}
	err := add(b, "first")
	data, _, rerr := shared.Read(ctx, m, "model/counter")
	if rerr != nil {
		t.Fatal(rerr)
	}
	var ids []string
	if err := json.Unmarshal(data, &ids); err != nil {
		t.Fatal(err)
	}
	if n := slices.Index(ids, "first"); n < 0 || slices.Index(ids[n+1:], "first") >= 0 {
		t.Fatalf("the first update is %d times in the record, want once: %v", strings.Count(strings.Join(ids, ","), "first"), ids)
	}
	if err == nil || !strings.Contains(err.Error(), "outcome is unknown") {
		t.Errorf("Update: %v, want its outcome reported unknown", err)
	}
}
