package metrics

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// TestLossJobLabelsCapped: a user creating thousands of job folders cannot blow up the series count:
// the per-job loss gauges keep at most MaxLabelValues series, the jobs with losses among them by name,
// the rest summed under OtherLabel and counted as folded.
func TestLossJobLabelsCapped(t *testing.T) {
	for _, tc := range []struct {
		name       string
		jobs       int
		wantSeries int
		wantFolded float64
	}{
		{"under the cap", 10, 10, 0},
		{"at the cap", MaxLabelValues, MaxLabelValues, 0},
		{"thousands of job folders", 5000, MaxLabelValues, float64(5000 - (MaxLabelValues - 1))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := New()
			jobs := map[string]JobLoss{}
			for i := range tc.jobs {
				jobs[fmt.Sprintf("job-%05d", i)] = JobLoss{}
			}
			last := fmt.Sprintf("job-%05d", tc.jobs-1)
			jobs[last] = JobLoss{BrokenCheckpoints: 2, MissingObjects: 3} // sorts last by name
			jobs["job-00003"] = JobLoss{MissingObjects: 1}
			m.SetLoss(LossStats{Jobs: jobs})
			if got := seriesOf(t, m, "ckguard_broken_checkpoints"); got != tc.wantSeries {
				t.Errorf("%d broken-checkpoint series, want %d", got, tc.wantSeries)
			}
			if got := seriesOf(t, m, "ckguard_missing_referenced_objects"); got != tc.wantSeries {
				t.Errorf("%d missing-object series, want %d", got, tc.wantSeries)
			}
			if got := value(t, m.labelsFolded.WithLabelValues("ckguard_broken_checkpoints")); got != tc.wantFolded {
				t.Errorf("folded %v, want %v", got, tc.wantFolded)
			}
			{
				// The job with losses is named although it sorts last; the total is kept.
				if got := value(t, m.loss.broken.WithLabelValues(last)); got != 2 {
					t.Errorf("%s broken = %v, want 2 (named: it has losses)", last, got)
				}
				total := 0.0
				for j := range m.loss.jobs {
					total += value(t, m.loss.missing.WithLabelValues(j))
				}
				if total != 4 {
					t.Errorf("missing objects over all series = %v, want 4", total)
				}
			}
			// The next pass with few jobs drops the folded series.
			m.SetLoss(LossStats{Jobs: map[string]JobLoss{"orders": {}}})
			if got := seriesOf(t, m, "ckguard_broken_checkpoints"); got != 1 {
				t.Errorf("after a small pass: %d series, want 1", got)
			}
		})
	}
}

// TestFoldLabelsClash: a job folder named like the folded value is folded too, never mixed silently.
func TestFoldLabelsClash(t *testing.T) {
	got, folded := FoldLabels(map[string]int{"a": 1, OtherLabel: 5}, 10, func(a, b int) int { return a + b }, func(v int) int { return v })
	if folded != 1 || got[OtherLabel] != 5 || got["a"] != 1 || len(got) != 2 {
		t.Errorf("FoldLabels = %v, %d", got, folded)
	}
}

func seriesOf(t *testing.T, m *Metrics, name string) int {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			return len(mf.GetMetric())
		}
	}
	return 0
}

func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}
