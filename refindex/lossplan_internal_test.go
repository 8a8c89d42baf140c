package refindex

import (
	"fmt"
	"math/rand/v2"
	"path"
	"slices"
	"sort"
	"strings"
	"testing"
)

// streamUnits plans sorted keys with the streaming planner, no cuts.
func streamUnits(keys []string, canList bool) (units []lossUnit, cost int) {
	p := &unitPlanner{canList: canList, keep: true}
	for _, k := range keys {
		p.add([]byte(k))
	}
	p.cut()
	return p.take(), p.made
}

// unitStrings renders units in a canonical order for comparison.
func unitStrings(units []lossUnit) []string {
	out := make([]string, 0, len(units))
	for _, u := range units {
		out = append(out, fmt.Sprintf("%q list=%v %s", u.dir, u.list, strings.Join(u.keys, ",")))
	}
	sort.Strings(out)
	return out
}

func folderKeys(dir, stem string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%s%05d", dir, stem, i)
	}
	return out
}

// TestLossPlanFolderInterleaving: a folder's keys are not contiguous in key order ("d/x" < "d/x/a" <
// "d/x0"); the streaming planner groups them as planUnits groups the whole sorted set (same units,
// same cost), including folders larger than a listing page around the tail rule.
func TestLossPlanFolderInterleaving(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 15))
	random := func() []string {
		stems := []string{"x", "x-1", "x.a", "x0", "y", "x/", "x/y/", "x-1/", "x0/", "y/z/"}
		var ks []string
		for range 300 {
			ks = append(ks, "d/"+stems[rng.IntN(len(stems))]+fmt.Sprint(rng.IntN(40)))
		}
		return ks
	}
	cases := []struct {
		name string
		keys []string
	}{
		{"subfolder between a folder's keys", []string{"d/x", "d/x/a", "d/x/b", "d/x0", "d/y"}},
		{"one key either side of a subfolder", []string{"d/x", "d/x/a", "d/x/b", "d/y"}},
		{"nested three deep", []string{"a", "a-b", "a/b", "a/b/c", "a/b/c/d", "a/b/c0", "a/b0", "a0", "b"}},
		{"root keys around folders", []string{"_x", "d/a", "d/b", "e", "e/f", "f"}},
		{"single keys only", []string{"a/x", "b/x", "c/x"}},
		{"page plus one around a subfolder", append(append(folderKeys("s", "a", 600), folderKeys("s/sub", "k", 3)...), folderKeys("s", "z", 401)...)},
		{"page plus two", folderKeys("s", "k", listPage+minListKeys)},
		{"pages around subfolders", append(append(append(folderKeys("s", "a", 1500), folderKeys("s/a", "k", 1200)...), folderKeys("s/a/b", "k", 1)...), folderKeys("s", "b", 1000)...)},
		{"random interleaving", random()},
		{"random interleaving 2", random()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			keys := slices.Compact(slices.Sorted(slices.Values(tc.keys)))
			for _, canList := range []bool{true, false} {
				want := planUnits(keys, canList)
				got, cost := streamUnits(keys, canList)
				if w, g := unitStrings(want), unitStrings(got); !slices.Equal(w, g) {
					t.Fatalf("canList=%v: streaming units\n%s\nwant (planUnits)\n%s", canList, strings.Join(g, "\n"), strings.Join(w, "\n"))
				}
				if cost != roundCost(want) {
					t.Fatalf("canList=%v: streaming cost %d, planUnits %d", canList, cost, roundCost(want))
				}
			}
		})
	}
}

// TestLossPlanCuts: passes and chunks cut from the stream cover every key exactly once per rotation,
// no pass's expected requests exceed the budget nor a chunk's its size (unless a single key does),
// the counting rotation predicts the passes and requests the passes take, and a cut costs at most one
// request per open folder more than planUnits.
func TestLossPlanCuts(t *testing.T) {
	keys := append(append(append(folderKeys("j/shared", "a", 2500), folderKeys("j/chk-1", "p", 3)...), folderKeys("j/shared/sub", "k", 7)...), folderKeys("j/shared", "z", 40)...)
	keys = append(keys, "j/top", "k/one", "root")
	sort.Strings(keys)
	for _, tc := range []struct{ budget, chunk, seg int }{{1, 0, 0}, {2, 1, 0}, {3, 0, 0}, {5, 2, 0}, {7, 3, 0}, {0, 1, 0}, {0, 0, 0}, {0, 0, 500}, {3, 1, 700}, {0, 2, 1}} {
		t.Run(fmt.Sprintf("budget=%d,chunk=%d,seg=%d", tc.budget, tc.chunk, tc.seg), func(t *testing.T) {
			round := &passCutter{p: &unitPlanner{canList: true}, budget: tc.budget, chunk: tc.chunk, seg: tc.seg}
			for _, k := range keys {
				round.feedRotation([]byte(k))
			}
			round.endPass()
			seen := map[string]int{}
			passes, requests, chunks := 0, 0, 0
			c := &passCutter{p: &unitPlanner{canList: true, keep: true}, budget: tc.budget, chunk: tc.chunk, seg: tc.seg}
			i := 0
			for i < len(keys) {
				passes++
				spent := 0
				chunkCost := c.p.made
				for {
					stop := cutNone
					for i < len(keys) {
						if stop = c.offer([]byte(keys[i])); stop != cutNone {
							break
						}
						i++
					}
					if stop == cutSegment {
						c.endSegment()
					} else {
						c.endChunk()
					}
					chunks++
					units := c.p.take()
					if tc.seg > 0 && len(units) > tc.seg {
						t.Fatalf("segment of %d units over %d keys", len(units), tc.seg)
					}
					if tc.chunk > 0 && stop != cutSegment {
						if c.p.made-chunkCost > tc.chunk && c.p.made-chunkCost > 1 {
							t.Fatalf("chunk of %d expected requests over %d", c.p.made-chunkCost, tc.chunk)
						}
						chunkCost = c.p.made
					}
					for _, u := range units {
						spent += u.cost()
						for _, k := range u.keys {
							seen[k]++
						}
					}
					if stop != cutChunk && stop != cutSegment {
						break
					}
				}
				c.endPass()
				requests += spent
				if tc.budget > 0 && spent > tc.budget {
					t.Fatalf("pass %d: %d expected requests over a budget of %d", passes, spent, tc.budget)
				}
			}
			for _, k := range keys {
				if seen[k] != 1 {
					t.Fatalf("%s checked %d times in a rotation", k, seen[k])
				}
			}
			if round.passes != passes || round.p.made != requests || round.p.keys != len(keys) {
				t.Fatalf("counted rotation: %d passes, %d requests, %d keys; the passes took %d, %d, %d", round.passes, round.p.made, round.p.keys, passes, requests, len(keys))
			}
			// At most 4 folders are open at a cut here ("", j, j/shared, j/shared/sub).
			if plan := roundCost(planUnits(keys, true)); requests > plan+4*(chunks-1) {
				t.Fatalf("rotation of %d requests in %d chunks, planUnits %d", requests, chunks, plan)
			}
		})
	}
}

// TestLossPlanKeyDir: the planner files every key under the folder planUnits does (path.Dir), the
// literal keys without allocating, the others through path.Dir; a stream of odd keys still puts each
// key into exactly one unit.
func TestLossPlanKeyDir(t *testing.T) {
	odd := []string{"a", "a/b", "a//b", "a/./b", "a/../b", "/a/b", "a/b/", ".", "..", "./a", "a/..", "a.b/c..d/e", "...", "a/.../b", ".a/b", "a/.b", "a/b..", "x/../y/z", "y/q"}
	for _, k := range odd {
		want := path.Dir(k)
		if want == "." {
			want = ""
		}
		if got := string(keyDir([]byte(k))); got != want {
			t.Errorf("keyDir(%q) = %q, want %q", k, got, want)
		}
	}
	keys := slices.Sorted(slices.Values(odd))
	units, _ := streamUnits(keys, true)
	seen := map[string]int{}
	for _, u := range units {
		for _, k := range u.keys {
			seen[k]++
			if d := keyDir([]byte(k)); string(d) != u.dir {
				t.Errorf("%s in a unit of folder %q, not %q", k, u.dir, d)
			}
		}
	}
	for _, k := range keys {
		if seen[k] != 1 {
			t.Errorf("%s in %d units", k, seen[k])
		}
	}
	if n := testing.AllocsPerRun(100, func() { keyDir([]byte("flink/job/shared/sst-000001")) }); n != 0 {
		t.Errorf("keyDir of a literal key allocates %v times", n)
	}
}
