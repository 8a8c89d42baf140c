package metrics

import "testing"

// flinkSeries reads the registry's samples of name by endpoint label.
func flinkSeries(t *testing.T, m *Metrics, name string) map[string]float64 {
	t.Helper()
	mfs, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, s := range mf.GetMetric() {
			for _, l := range s.GetLabel() {
				if l.GetName() == "endpoint" {
					out[l.GetValue()] = s.GetGauge().GetValue()
				}
			}
		}
	}
	return out
}

// One series per configured endpoint: up is 1 or 0, the running jobs as reported; an endpoint no
// longer in the poll loses its series.
func TestSetFlink(t *testing.T) {
	m := New()
	m.SetFlink([]FlinkEndpoint{{URL: "http://jm1:8081", Up: true, Running: 3}, {URL: "http://jm2:8081"}})
	up := flinkSeries(t, m, "ckguard_flink_rest_up")
	if up["http://jm1:8081"] != 1 || up["http://jm2:8081"] != 0 || len(up) != 2 {
		t.Errorf("ckguard_flink_rest_up %v; want jm1 1, jm2 0", up)
	}
	if r := flinkSeries(t, m, "ckguard_flink_jobs_running"); r["http://jm1:8081"] != 3 {
		t.Errorf("ckguard_flink_jobs_running %v; want jm1 3", r)
	}
	m.SetFlink([]FlinkEndpoint{{URL: "http://jm1:8081", Up: true}})
	if up := flinkSeries(t, m, "ckguard_flink_rest_up"); len(up) != 1 {
		t.Errorf("ckguard_flink_rest_up %v after jm2 left; want jm1 only", up)
	}
	var nilM *Metrics
	nilM.SetFlink(nil) // no metrics endpoint: a no-op
}
