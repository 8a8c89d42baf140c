package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestParseRate: --read-rate takes decimal and binary units, an optional /s, and 0 for no cap; anything
// else is refused (a typo must not read a live store at full speed).
func TestParseRate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		bad  bool
	}{
		{in: "50MiB", want: 50 << 20},
		{in: "50MiB/s", want: 50 << 20},
		{in: "1GB", want: 1e9},
		{in: "1.5KB", want: 1500},
		{in: "2KiB", want: 2048},
		{in: "4096", want: 4096},
		{in: "10B", want: 10},
		{in: "0", want: 0},
		{in: " 3MB ", want: 3e6},
		{in: "50mb", bad: true},
		{in: "50 MiB", bad: true},
		{in: "-1MB", bad: true},
		{in: "fast", bad: true},
		{in: "", bad: true},
		{in: "1TB", bad: true},
	} {
		got, err := parseRate(tc.in)
		switch {
		case tc.bad && err == nil:
			t.Errorf("parseRate(%q) = %d, want an error", tc.in, got)
		case !tc.bad && (err != nil || got != tc.want):
			t.Errorf("parseRate(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
}

// TestReadProgress: off a terminal the --read progress is a line per progressEvery (never one per
// chunk, which would flood a log) and always a last one at the end, each with the share done and the
// rate in MB/s.
func TestReadProgress(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	now := time.Unix(1_000_000, 0)
	p := readProgress(f, func() time.Time { return now })
	const total = 100 << 20
	for done := int64(1 << 20); done <= total; done += 1 << 20 {
		now = now.Add(time.Second) // 1 MiB a second: 100 s in all
		p(done, total)
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	// One at the first call (nothing printed yet), then every 15 s, then the end.
	if len(lines) < 6 || len(lines) > 9 {
		t.Fatalf("%d progress lines for 100 s of reading, want one per %v:\n%s", len(lines), progressEvery, b)
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "reading: ") || !strings.HasSuffix(l, " MB/s") || strings.Contains(l, "\r") {
			t.Errorf("progress line %q", l)
		}
	}
	if last := lines[len(lines)-1]; last != "reading: 100.0 MiB of 100.0 MiB (100%), 1.0 MB/s" {
		t.Errorf("last progress line %q", last)
	}
}
