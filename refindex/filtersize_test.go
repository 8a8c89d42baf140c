package refindex

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
)

func quietFilter(objects int) *refFilter {
	return newRefFilter(objects, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

// The filter's share of the mount's memory budget (README "Memory"): at most 10 bytes per distinct
// referenced object at 1 M and 10 M objects (it took 4-byte counters × 8 slots rounded up to a power
// of two: 512 MiB at 10 M).
func TestFilterBytesPerObject(t *testing.T) {
	for _, objects := range []int{1_000_000, 10_000_000} {
		f := quietFilter(objects)
		if per := float64(f.bytes()) / float64(objects); per > 10 {
			t.Errorf("%d objects: the filter takes %d bytes, %.1f per object; want at most 10", objects, f.bytes(), per)
		}
		if f.n < uint64(objects)*filterSlotsPerObject {
			t.Errorf("%d objects: %d slots, want at least %d per object", objects, f.n, filterSlotsPerObject)
		}
	}
}

// A slot of one byte saturates: from then on it answers "maybe referenced" whatever the decrements
// do, so counts beyond its range never wrap it to a false "unreferenced"; below saturation it counts
// exactly and returns to zero.
func TestFilterSaturatesTowardsMaybeReferenced(t *testing.T) {
	const obj = "flink/job/shared/hot"
	for _, refs := range []int{1, 2, 254, 255, 256, 300, 1000} {
		t.Run(fmt.Sprint(refs), func(t *testing.T) {
			f := quietFilter(0)
			f.markReady()
			h := f.hash(obj)
			for range refs {
				f.inc(h)
			}
			for left := refs; left > 0; left-- {
				if f.unreferenced(obj, 0) {
					t.Fatalf("%d of %d references left: the filter answers unreferenced", left, refs)
				}
				f.dec(h)
			}
			if f.broken.Load() {
				t.Fatal("balanced decrements marked the filter broken")
			}
			sticky := refs >= filterSaturated
			if got := f.unreferenced(obj, 0); got == sticky {
				t.Fatalf("after every reference is gone unreferenced = %v, want %v (saturated: %v)", got, !sticky, sticky)
			}
		})
	}
}

// A model of many objects sharing few slots (collisions on every slot, some counts far past
// saturation): after every increment or decrement, no object with a reference left is ever answered
// unreferenced, and balanced counting never marks the filter broken.
func TestFilterNeverFalseUnreferencedModel(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 99))
			f := quietFilter(0) // 4,096 slots for 3,000 objects
			f.markReady()
			objs := make([]string, 3_000)
			for i := range objs {
				objs[i] = fmt.Sprintf("flink/job-%d/shared/%d", i%7, i)
			}
			refs := make([]int, len(objs))
			var live []int // objects with references, possibly repeated
			for step := range 200_000 {
				var i int
				if len(live) > 0 && rng.IntN(2) == 0 {
					k := rng.IntN(len(live))
					i = live[k]
					live[k] = live[len(live)-1]
					live = live[:len(live)-1]
					refs[i]--
					f.dec(f.hash(objs[i]))
				} else {
					i = rng.IntN(len(objs))
					if rng.IntN(10) == 0 {
						i %= 16 // a few hot objects, referenced hundreds of times
					}
					refs[i]++
					live = append(live, i)
					f.inc(f.hash(objs[i]))
				}
				for _, j := range []int{i, rng.IntN(len(objs)), rng.IntN(16)} {
					if refs[j] > 0 && f.unreferenced(objs[j], 0) {
						t.Fatalf("step %d: %s has %d references and the filter answers unreferenced", step, objs[j], refs[j])
					}
				}
			}
			if f.broken.Load() {
				t.Fatal("balanced counting marked the filter broken")
			}
		})
	}
}

// Decrements that race with the end of a background fill are applied exactly once, whether they
// arrive before markReady (pending) or after: every slot ends at its true count.
func TestFilterDecrementsRacingReady(t *testing.T) {
	f := quietFilter(1000)
	objs := make([]string, 500)
	for i := range objs {
		objs[i] = fmt.Sprintf("flink/job/shared/%d", i)
		f.inc(f.hash(objs[i]))
		f.inc(f.hash(objs[i]))
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for _, o := range objs {
			f.dec(f.hash(o))
		}
	}()
	go func() { defer wg.Done(); f.markReady() }()
	wg.Wait()
	if f.broken.Load() {
		t.Fatal("decrements around markReady marked the filter broken")
	}
	want := map[uint64]uint32{}
	for _, o := range objs {
		want[f.slot(f.hash(o))]++
	}
	for i := uint64(0); i < f.n; i++ {
		if got := f.countAt(i); got != want[i] {
			t.Fatalf("slot %d holds %d, want %d", i, got, want[i])
		}
	}
}
