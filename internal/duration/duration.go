// Package duration is ckguard's one form of a duration, on the command line and in JSON: Go's syntax
// (90s, 15m, 1h30m, 0s) plus days and weeks (7d, 2w, 1d12h), as operators write retention periods.
// Every duration flag parses with Parse and every duration in JSON output is a string that Parse reads
// back (Format), so a value printed by one command can be passed to another.
package duration

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Syntax is the one-line description every rejection names.
const Syntax = "a number and a unit (ms, s, m, h, d = 24h, w = 7d), combinable: 90s, 15m, 1h30m, 7d, 2w, 0s"

const (
	day  = 24 * time.Hour
	week = 7 * day
)

// Parse reads a duration in Go's syntax extended with d (24h) and w (7d). A bare 0 is 0s; any other
// number needs a unit, so "7" is never silently 7 nanoseconds.
func Parse(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, fmt.Errorf("empty duration: want %s", Syntax)
	}
	if in == "0" {
		return 0, nil
	}
	neg := false
	rest := in
	if rest[0] == '-' || rest[0] == '+' {
		neg = rest[0] == '-'
		rest = rest[1:]
		if rest == "" {
			return 0, fmt.Errorf("invalid duration %q: want %s", s, Syntax)
		}
	}
	// Split off the leading day/week components (Go's parser does not know them); the remainder, if
	// any, is Go syntax.
	var total time.Duration
	for rest != "" {
		i := 0
		for i < len(rest) && (rest[i] >= '0' && rest[i] <= '9' || rest[i] == '.') {
			i++
		}
		if i == 0 || i == len(rest) {
			break
		}
		unit := rest[i]
		if unit != 'd' && unit != 'w' {
			break
		}
		n, err := strconv.ParseFloat(rest[:i], 64)
		if err != nil {
			return 0, fmt.Errorf("invalid duration %q: want %s", s, Syntax)
		}
		mult := day
		if unit == 'w' {
			mult = week
		}
		if n > float64(1<<62)/float64(mult) {
			return 0, fmt.Errorf("duration %q is too long", s)
		}
		total += time.Duration(n * float64(mult))
		rest = rest[i+1:]
	}
	if rest != "" {
		d, err := time.ParseDuration(rest)
		if err != nil || strings.ContainsAny(rest, "+-") {
			return 0, fmt.Errorf("invalid duration %q: want %s", s, Syntax)
		}
		total += d
	}
	if neg {
		total = -total
	}
	return total, nil
}

// Format writes d in the shortest form Parse reads back exactly: whole days as d (168h is 7d), then
// hours, minutes and seconds; sub-second parts as Go writes them (1.5s, 250ms).
func Format(d time.Duration) string {
	if d == 0 {
		return "0s"
	}
	sign := ""
	if d < 0 {
		sign, d = "-", -d
	}
	var b strings.Builder
	b.WriteString(sign)
	if days := d / day; days > 0 {
		fmt.Fprintf(&b, "%dd", days)
		d -= days * day
	}
	if d == 0 {
		return b.String()
	}
	if d%time.Second != 0 {
		b.WriteString(d.String()) // sub-second precision: Go's own form, e.g. 1h0m0.5s
		return b.String()
	}
	if h := d / time.Hour; h > 0 {
		fmt.Fprintf(&b, "%dh", h)
		d -= h * time.Hour
	}
	if m := d / time.Minute; m > 0 {
		fmt.Fprintf(&b, "%dm", m)
		d -= m * time.Minute
	}
	if s := d / time.Second; s > 0 {
		fmt.Fprintf(&b, "%ds", s)
	}
	return b.String()
}

// D is a time.Duration that is written to and read from JSON as Format's string ("7d", "90s"),
// the form every ckguard JSON output uses for durations.
type D time.Duration

// MarshalJSON writes the duration as a string in Format's form.
func (d D) MarshalJSON() ([]byte, error) { return json.Marshal(Format(time.Duration(d))) }

// UnmarshalJSON reads a string in Parse's syntax; a number is taken as nanoseconds (the form older
// versions wrote), so a newer client still reads an older mount's answer.
func (d *D) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		var n int64
		if err2 := json.Unmarshal(b, &n); err2 != nil {
			return fmt.Errorf("duration: want a string such as \"7d\": %w", err)
		}
		*d = D(n)
		return nil
	}
	v, err := Parse(s)
	if err != nil {
		return err
	}
	*d = D(v)
	return nil
}

// String is Format's form.
func (d D) String() string { return Format(time.Duration(d)) }
