// Package bytesize parses the byte amounts of flags: a plain number of bytes, a number with a binary
// (KiB, MiB, GiB, TiB) or decimal (KB, MB, GB, TB; K, M, G, T mean the binary units) suffix, or, where a
// flag allows it, a percentage of a filesystem's size.
package bytesize

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

var units = []struct {
	suffix string
	mult   float64
}{
	{"kib", 1 << 10}, {"mib", 1 << 20}, {"gib", 1 << 30}, {"tib", 1 << 40},
	{"kb", 1e3}, {"mb", 1e6}, {"gb", 1e9}, {"tb", 1e12},
	{"k", 1 << 10}, {"m", 1 << 20}, {"g", 1 << 30}, {"t", 1 << 40},
	{"b", 1},
}

// Parse reads a byte amount such as 512MiB, 10G or 1073741824. Negative amounts are refused.
func Parse(s string) (int64, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	mult := 1.0
	for _, u := range units {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseFloat(t, 64)
	if err != nil || t == "" {
		return 0, fmt.Errorf("%q is no byte amount (e.g. 1073741824, 512MiB, 10GiB)", s)
	}
	n := v * mult
	if n < 0 || math.IsNaN(n) || n > math.MaxInt64 {
		return 0, fmt.Errorf("%q: a byte amount must be between 0 and 8 EiB", s)
	}
	return int64(n), nil
}

// Bound is a byte amount or a percentage of a filesystem's size (exactly one of them set, or neither:
// no bound).
type Bound struct {
	Bytes   int64
	Percent float64 // 0 < Percent <= 100
}

// ParseBound reads a byte amount (Parse) or a percentage such as 10%. "" and "0" are no bound.
func ParseBound(s string) (Bound, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return Bound{}, nil
	}
	if p, ok := strings.CutSuffix(t, "%"); ok {
		v, err := strconv.ParseFloat(strings.TrimSpace(p), 64)
		if err != nil || v < 0 || v > 100 || math.IsNaN(v) {
			return Bound{}, fmt.Errorf("%q is no percentage between 0%% and 100%%", s)
		}
		return Bound{Percent: v}, nil
	}
	n, err := Parse(t)
	if err != nil {
		return Bound{}, err
	}
	return Bound{Bytes: n}, nil
}

// IsZero reports whether b bounds nothing.
func (b Bound) IsZero() bool { return b.Bytes == 0 && b.Percent == 0 }

// Of is the bound in bytes for a filesystem of size bytes.
func (b Bound) Of(size int64) int64 {
	if b.Percent > 0 {
		return int64(float64(size) * b.Percent / 100)
	}
	return b.Bytes
}

// String is the bound as given ("10%", "536870912").
func (b Bound) String() string {
	if b.Percent > 0 {
		return strconv.FormatFloat(b.Percent, 'f', -1, 64) + "%"
	}
	return strconv.FormatInt(b.Bytes, 10)
}
