package metrics

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// One series per configured endpoint: up is 1 or 0, the running jobs as reported; an endpoint no
// longer in the poll loses its series.
func TestSetFlink(t *testing.T) {
	m := New()
	m.SetFlink([]FlinkEndpoint{{URL: "http://jm1:8081", Up: true, Running: 3}, {URL: "http://jm2:8081"}})
	if v := testutil.ToFloat64(m.flink.up.WithLabelValues("http://jm1:8081")); v != 1 {
		t.Errorf("up jm1 = %v; want 1", v)
	}
	if v := testutil.ToFloat64(m.flink.up.WithLabelValues("http://jm2:8081")); v != 0 {
		t.Errorf("up jm2 = %v; want 0", v)
	}
	if v := testutil.ToFloat64(m.flink.jobs.WithLabelValues("http://jm1:8081")); v != 3 {
		t.Errorf("running jm1 = %v; want 3", v)
	}
	m.SetFlink([]FlinkEndpoint{{URL: "http://jm1:8081", Up: true}})
	if n := testutil.CollectAndCount(m.flink.up); n != 1 {
		t.Errorf("%d up series after jm2 left; want 1", n)
	}
	var nilM *Metrics
	nilM.SetFlink(nil) // no metrics endpoint: a no-op
}
