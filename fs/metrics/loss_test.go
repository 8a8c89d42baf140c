package metrics

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestSetLoss: per-job gauges follow the passes, a job without live checkpoints loses its series, and the
// age of the last complete check is -1 until one ends.
func TestSetLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		passes []LossStats
		want   string
	}{
		{"no complete check yet", []LossStats{{Jobs: map[string]JobLoss{"orders": {}}, Objects: 7, RoundPasses: 3}}, `
ckguard_broken_checkpoints{job="orders"} 0
ckguard_loss_check_age_seconds -1
ckguard_loss_check_bound_seconds 0
ckguard_loss_check_duration_seconds 0
ckguard_loss_check_objects 7
ckguard_loss_check_round_passes 3
ckguard_missing_referenced_objects{job="orders"} 0
`},
		{"a loss, then the job is gone", []LossStats{
			{Jobs: map[string]JobLoss{"orders": {BrokenCheckpoints: 2, MissingObjects: 1}, "payments": {}}, Objects: 9, LastComplete: time.Now()},
			{Jobs: map[string]JobLoss{"orders": {BrokenCheckpoints: 1, MissingObjects: 3}}, Objects: 5, RoundPasses: 1, Duration: 2500 * time.Millisecond, Bound: 32500 * time.Millisecond},
		}, `
ckguard_broken_checkpoints{job="orders"} 1
ckguard_loss_check_age_seconds 0
ckguard_loss_check_bound_seconds 32.5
ckguard_loss_check_duration_seconds 2.5
ckguard_loss_check_objects 5
ckguard_loss_check_round_passes 1
ckguard_missing_referenced_objects{job="orders"} 3
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			for _, p := range tc.passes {
				m.SetLoss(p)
			}
			fams, err := m.Registry.Gather()
			if err != nil {
				t.Fatal(err)
			}
			var lines []string
			for _, f := range fams {
				if !strings.Contains(f.GetName(), "broken_checkpoints") && !strings.Contains(f.GetName(), "missing_referenced") && !strings.HasPrefix(f.GetName(), "ckguard_loss_check_") || strings.HasSuffix(f.GetName(), "_total") {
					continue
				}
				for _, mt := range f.GetMetric() {
					l := f.GetName()
					for _, lp := range mt.GetLabel() {
						l += fmt.Sprintf("{%s=%q}", lp.GetName(), lp.GetValue())
					}
					v := mt.GetGauge().GetValue()
					if f.GetName() == "ckguard_loss_check_age_seconds" && v >= 0 {
						v = 0 // seconds since the pass: only its sign is stable
					}
					lines = append(lines, fmt.Sprintf("%s %g", l, v))
				}
			}
			if g := "\n" + strings.Join(lines, "\n") + "\n"; g != tc.want {
				t.Fatalf("got%swant%s", g, tc.want)
			}
		})
	}
}
