package demo

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestBuildScenario(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s, err := Build(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	cur := s.LiveUnder(s.CurrentJobDir)
	if len(cur) < 2 || len(s.LiveUnder(s.Savepoint)) != 1 || len(s.LiveUnder(s.OldJobDir)) == 0 {
		t.Fatalf("live checkpoints: current %v, savepoint %v, old %v", cur, s.LiveUnder(s.Savepoint), s.LiveUnder(s.OldJobDir))
	}
	// The story needs: current job → old job's SSTs, old files past find's 7 days, garbage.
	cross := 0
	for k := range s.Referenced(cur) {
		if strings.HasPrefix(k, s.OldJobDir+"/shared/") {
			cross++
			if age := now.Sub(s.Tree.Files[k].ModTime); age < s.StaleAfter {
				t.Errorf("%s is %v old: find -mtime +7 would not select it", k, age)
			}
		}
	}
	if cross == 0 {
		t.Fatal("no cross-job reference")
	}
	ref := s.Referenced(s.LiveUnder(""))
	garbage := 0
	for k, f := range s.Tree.Files {
		if _, ok := ref[k]; !ok && s.Tree.Live[k] == nil && now.Sub(f.ModTime) > s.StaleAfter {
			garbage++
		}
	}
	if garbage < 10 {
		t.Errorf("only %d old garbage files", garbage)
	}
}

// TestJudge: the demo fails when the guard deletes a referenced file or keeps garbage.
func TestJudge(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	s, err := Build(t.TempDir(), now)
	if err != nil {
		t.Fatal(err)
	}
	stay := append(s.LiveUnder(s.CurrentJobDir), s.LiveUnder(s.Savepoint)...)
	keep := s.Referenced(stay)
	for _, m := range stay {
		keep[m] = m
	}
	// A perfect guard: everything under the old job selected, only the kept files survive.
	perfect := func() phase {
		ph := phase{attempted: map[string]bool{}, deleted: map[string]bool{}}
		for k := range s.Tree.Files {
			if strings.HasPrefix(k, s.OldJobDir+"/") {
				ph.attempted[k] = true
				if _, ok := keep[k]; !ok {
					ph.deleted[k] = true
				}
			}
		}
		return ph
	}
	var out bytes.Buffer
	res := &Result{}
	if err := judge(&printer{w: &out}, s, []phase{perfect()}, res); err != nil {
		t.Fatalf("perfect guard judged wrong: %v\n%s", err, out.String())
	}
	if res.Refused == 0 || res.Refused != res.Expected || res.Deleted == 0 {
		t.Fatalf("counts: %+v", res)
	}
	var de *Error
	// A guard that lets a referenced SST go.
	leaky := perfect()
	for k := range leaky.attempted {
		if _, ok := keep[k]; ok {
			leaky.deleted[k] = true
			break
		}
	}
	if err := judge(&printer{w: &out}, s, []phase{leaky}, &Result{}); !errors.As(err, &de) || !strings.Contains(err.Error(), "deleted although") {
		t.Fatalf("leaky guard: %v", err)
	}
	// A guard that refuses garbage.
	stingy := perfect()
	for k := range stingy.deleted {
		delete(stingy.deleted, k)
		break
	}
	if err := judge(&printer{w: &out}, s, []phase{stingy}, &Result{}); !errors.As(err, &de) || !strings.Contains(err.Error(), "refused although") {
		t.Fatalf("stingy guard: %v", err)
	}
}
