package metrics

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
)

func TestServeExposesDecisionsAndIndexGauges(t *testing.T) {
	m := New()
	m.Decision("unlink", false, "referenced")
	m.Decision("unlink", false, "referenced")
	m.Decision("unlink", true, "allowed")
	m.Sync(20*time.Millisecond, nil)
	m.SetIndexStats(IndexStats{LiveCheckpoints: 3, LiveSavepoints: 1, ReferencedBytes: 10, OrphanedBytes: 5, LastSync: time.Now().Add(-2 * time.Second)})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := m.Serve(ctx, "127.0.0.1:0", slog.Default())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	text := string(b)
	for _, want := range []string{
		`ckguard_refusals_total{op="unlink",reason="referenced"} 2`,
		`ckguard_allowed_total{op="unlink"} 1`,
		`ckguard_live_checkpoints 3`,
		`ckguard_live_savepoints 1`,
		`ckguard_orphaned_bytes 5`,
		`ckguard_sync_duration_seconds_count 1`,
		`ckguard_index_lag_seconds 2`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	if _, err := m.Serve(ctx, "256.0.0.1:1", slog.Default()); err == nil {
		t.Error("bad address accepted")
	}
}

func TestNilMetricsAreNoops(t *testing.T) {
	var m *Metrics
	m.Decision("unlink", true, "allowed")
	m.Sync(time.Second, nil)
	m.NotifyError("deleted")
	m.SetIndexStats(IndexStats{})
}

// Decision is counted on the path of every guarded operation: it must not allocate.
func BenchmarkDecision(b *testing.B) {
	m := New()
	b.ReportAllocs()
	for b.Loop() {
		m.Decision("unlink", true, "allowed")
		m.DecisionLatency("unlink", time.Microsecond)
	}
}

// BenchmarkInstrumentedUnlink is the price of the FUSE latency histogram per request (two clock readings
// and one histogram observation) on top of a filesystem that does nothing.
func BenchmarkInstrumentedUnlink(b *testing.B) {
	for _, bc := range []struct {
		name string
		fs   fuse.RawFileSystem
	}{{"bare", fuse.NewDefaultRawFileSystem()}, {"instrumented", New().InstrumentRawFS(fuse.NewDefaultRawFileSystem())}} {
		b.Run(bc.name, func(b *testing.B) {
			h := &fuse.InHeader{NodeId: 1}
			b.ReportAllocs()
			for b.Loop() {
				bc.fs.Unlink(nil, h, "sst-000001")
			}
		})
	}
}
