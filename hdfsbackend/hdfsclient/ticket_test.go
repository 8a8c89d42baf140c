package hdfsclient

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestWatchTicket: a ticket-cache login WARNs ahead of its ticket's end (15 minutes, a sixth of the
// time left for short tickets) and again at the end, each naming the cache, KRB5CCNAME and the fixes;
// a stopped watch says nothing more.
func TestWatchTicket(t *testing.T) {
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name   string
		left   time.Duration
		stopAt int // sleeps allowed before the watch is stopped (-1: never)
		sleeps []time.Duration
		warns  []string
	}{
		{"day-long ticket", 24 * time.Hour, -1, []time.Duration{24*time.Hour - 15*time.Minute, 15 * time.Minute}, []string{"expires soon", "has expired"}},
		{"one-minute ticket", time.Minute, -1, []time.Duration{50 * time.Second, 10 * time.Second}, []string{"expires soon", "has expired"}},
		{"stopped before the first", time.Hour, 0, []time.Duration{50 * time.Minute}, nil},
		{"stopped before the end", time.Hour, 1, []time.Duration{50 * time.Minute, 10 * time.Minute}, []string{"expires soon"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, nil))
			now := start
			var slept []time.Duration
			watchTicket(log, "/tmp/missing-ccache", start.Add(tc.left), func() time.Time { return now }, func(d time.Duration) bool {
				slept = append(slept, d)
				if tc.stopAt >= 0 && len(slept) > tc.stopAt {
					return false
				}
				now = now.Add(d)
				return true
			})
			if len(slept) != len(tc.sleeps) {
				t.Fatalf("slept %v, want %v", slept, tc.sleeps)
			}
			for i := range slept {
				if slept[i] != tc.sleeps[i] {
					t.Errorf("sleep %d = %v, want %v", i, slept[i], tc.sleeps[i])
				}
			}
			lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
			if len(tc.warns) == 0 {
				if buf.Len() > 0 {
					t.Errorf("logged after the stop: %s", buf.String())
				}
				return
			}
			if len(lines) != len(tc.warns) {
				t.Fatalf("logged %d lines, want %d: %s", len(lines), len(tc.warns), buf.String())
			}
			for i, w := range tc.warns {
				for _, want := range []string{"level=WARN", w, "/tmp/missing-ccache", "KRB5CCNAME", "kinit -R", "--hdfs-keytab"} {
					if !strings.Contains(lines[i], want) {
						t.Errorf("line %d %q does not name %q", i, lines[i], want)
					}
				}
			}
		})
	}
}

func TestTicketWarnLead(t *testing.T) {
	for left, want := range map[time.Duration]time.Duration{
		10 * time.Hour: 15 * time.Minute, 90 * time.Minute: 15 * time.Minute, time.Hour: 10 * time.Minute, 0: 0, -time.Minute: -10 * time.Second,
	} {
		if got := ticketWarnLead(left); got != want {
			t.Errorf("ticketWarnLead(%v) = %v, want %v", left, got, want)
		}
	}
}
