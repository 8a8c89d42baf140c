package duration

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"0", 0, true}, {"0s", 0, true}, {"90s", 90 * time.Second, true}, {"1h30m", 90 * time.Minute, true},
		{"7d", 7 * day, true}, {"2w", 14 * day, true}, {"1d12h", 36 * time.Hour, true}, {"1w2d", 9 * day, true},
		{"1.5d", 36 * time.Hour, true}, {"168h", 7 * day, true}, {"250ms", 250 * time.Millisecond, true},
		{"-5m", -5 * time.Minute, true}, {" 1h ", time.Hour, true},
		{"7", 0, false}, {"", 0, false}, {"d", 0, false}, {"7x", 0, false}, {"1d-5m", 0, false}, {"-", 0, false},
		{"7 d", 0, false}, {"1e3d", 0, false}, {"99999999999999999999w", 0, false},
	} {
		got, err := Parse(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("Parse(%q) = %v, %v; want %v, ok=%v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.HasPrefix(tc.in, "9999") && !strings.Contains(err.Error(), Syntax) {
			t.Errorf("Parse(%q) error %q does not name the syntax", tc.in, err)
		}
	}
}

func TestFormatRoundTrip(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", time.Hour: "1h", 7 * day: "7d", 90 * time.Second: "1m30s", 36 * time.Hour: "1d12h",
		-5 * time.Minute: "-5m", 1500 * time.Millisecond: "1.5s", day + 500*time.Millisecond: "1d500ms",
	} {
		if got := Format(d); got != want {
			t.Errorf("Format(%v) = %q, want %q", d, got, want)
		}
		back, err := Parse(Format(d))
		if err != nil || back != d {
			t.Errorf("Parse(Format(%v)) = %v, %v", d, back, err)
		}
	}
}

func TestJSON(t *testing.T) {
	b, err := json.Marshal(struct{ G D }{D(7 * day)})
	if err != nil || string(b) != `{"G":"7d"}` {
		t.Fatalf("marshal: %s %v", b, err)
	}
	var v struct{ G D }
	for in, want := range map[string]time.Duration{`{"G":"2w"}`: 14 * day, `{"G":3600000000000}`: time.Hour} {
		if err := json.Unmarshal([]byte(in), &v); err != nil || time.Duration(v.G) != want {
			t.Errorf("unmarshal %s: %v %v", in, time.Duration(v.G), err)
		}
	}
}

func TestFlagRejectsNegative(t *testing.T) {
	v := &Value{}
	if err := v.Set("-5m"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("Set(-5m) = %v, want a rejection", err)
	}
	v.allowNegative = true
	if err := v.Set("-1s"); err != nil || v.d != -time.Second {
		t.Errorf("Set(-1s) with AllowNegative = %v (%v)", err, v.d)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{"7d", "1h30m", "2w3d4h", "-5m", "1.5d", "0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := Parse(s)
		if err != nil {
			return
		}
		if back, err := Parse(Format(d)); err != nil || back != d {
			t.Fatalf("Parse(%q) = %v; Format %q parses to %v, %v", s, d, Format(d), back, err)
		}
	})
}
