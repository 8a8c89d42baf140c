package refindex_test

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/localbackend/localstore"
	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// Long commands show progress when asked (the CLI passes stderr on a terminal): the rebuild's parse,
// verify's object checks and orphans' store walk each draw a bar, and so does the rebuild's listing (minutes
// on a big bucket); without WithProgress nothing is drawn.
func TestProgressBars(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	// Enough garbage and checkpoints that every bar has work above its threshold.
	for i := 0; i < 150; i++ {
		if err := tr.Write(fmt.Sprintf("garbage/old-%03d", i), 10, testNow.AddDate(0, 0, -30)); err != nil {
			t.Fatal(err)
		}
	}
	for _, withBar := range []bool{false, true} {
		st, err := localstore.New(tr.Root)
		if err != nil {
			t.Fatal(err)
		}
		var out bytes.Buffer
		opts := []refindex.Option{refindex.WithPathMap(tr.Maps, tr.EntropyKey), refindex.WithLogger(quiet)}
		if withBar {
			opts = append(opts, refindex.WithProgress(&out))
		}
		ix, err := refindex.Open(t.TempDir(), st, testPolicy(), opts...)
		if err != nil {
			t.Fatal(err)
		}
		if err := ix.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		res, err := ix.Orphans(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Files) < 150 {
			t.Errorf("orphans: %d files, want at least the 150 garbage files", len(res.Files))
		}
		ix.Close()
		got := out.String()
		for _, bar := range []string{"scanning the store for orphans", "listing the store for _metadata"} {
			if withBar && !strings.Contains(got, bar) {
				t.Errorf("with WithProgress: no %q progress drawn; output %q", bar, got)
			}
		}
		if !withBar && got != "" {
			t.Errorf("without WithProgress: drew %q", got)
		}
	}
}

// TestProgressLoggedWithoutWriter: without a progress writer (a mount daemon under a service manager) a
// rebuild's listing and orphans' walk log progress lines at the WithProgressLog interval, with the count
// so far, and a last line with the total; a negative interval logs none.
func TestProgressLoggedWithoutWriter(t *testing.T) {
	ctx := context.Background()
	tr, err := treegen.IncidentOne(t.TempDir(), testNow)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 150; i++ {
		if err := tr.Write(fmt.Sprintf("garbage/old-%03d", i), 10, testNow.AddDate(0, 0, -30)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name  string
		every time.Duration
		want  bool
	}{
		{"every nanosecond", time.Nanosecond, true},
		{"never", -1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st, err := localstore.New(tr.Root)
			if err != nil {
				t.Fatal(err)
			}
			var logs bytes.Buffer
			ix, err := refindex.Open(t.TempDir(), st, testPolicy(), refindex.WithPathMap(tr.Maps, tr.EntropyKey),
				refindex.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), refindex.WithProgressLog(tc.every))
			if err != nil {
				t.Fatal(err)
			}
			defer ix.Close()
			if err := ix.Rebuild(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := ix.Orphans(ctx, 0); err != nil {
				t.Fatal(err)
			}
			got := logs.String()
			for _, line := range []string{
				`msg="index work in progress" work="listing the store for _metadata" done=`,
				`msg="index work finished" work="listing the store for _metadata" done=`,
				`msg="index work in progress" work="scanning the store for orphans" done=`,
				`msg="index work finished" work="scanning the store for orphans" done=`,
			} {
				if strings.Contains(got, line) != tc.want {
					t.Errorf("log has %q = %v, want %v; log:\n%s", line, !tc.want, tc.want, got)
				}
			}
			if m := regexp.MustCompile(`msg="index work finished" work="scanning the store for orphans" done=([0-9]+)`).FindStringSubmatch(got); tc.want && (m == nil || len(m[1]) < 3) {
				t.Errorf("orphans' last line does not count the 150 garbage files and more; log:\n%s", got)
			}
		})
	}
}
