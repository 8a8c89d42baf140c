package metrics

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
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
	m.SetIndexStats(IndexStats{LiveCheckpoints: 3, LiveSavepoints: 1, ReferencedBytes: 10, OrphanedBytes: 5, LastSync: time.Now().Add(-2 * time.Second), ClockBehind: 90 * time.Second,
		UnmappedReferences: 4, InferredMaps: 2})
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
		`ckguard_store_clock_behind_seconds 90`,
		`ckguard_unmapped_references 4`,
		`ckguard_inferred_maps 2`,
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

// blockingFS answers Unlink once release is closed, after telling entered.
type blockingFS struct {
	fuse.RawFileSystem
	entered chan struct{}
	release chan struct{}
}

func (b *blockingFS) Unlink(<-chan struct{}, *fuse.InHeader, string) fuse.Status {
	b.entered <- struct{}{}
	<-b.release
	return fuse.OK
}

// TestConcurrency: requests answered at the same time count as overlapped, and in flight while answered.
func TestConcurrency(t *testing.T) {
	m := New()
	b := &blockingFS{RawFileSystem: fuse.NewDefaultRawFileSystem(), entered: make(chan struct{}), release: make(chan struct{})}
	raw := m.InstrumentRawFS(b)
	done := make(chan struct{})
	for i := 0; i < 3; i++ {
		go func() {
			raw.Unlink(nil, &fuse.InHeader{}, "x")
			done <- struct{}{}
		}()
		<-b.entered
	}
	if n := m.inflight.Load(); n != 3 {
		t.Errorf("in flight = %d, want 3", n)
	}
	close(b.release)
	for i := 0; i < 3; i++ {
		<-done
	}
	if begun, overlapped := m.Concurrency(); begun != 3 || overlapped != 2 {
		t.Errorf("Concurrency() = %d begun, %d overlapped; want 3, 2", begun, overlapped)
	}
	if begun, overlapped := m.Concurrency(); begun != 0 || overlapped != 0 {
		t.Errorf("second Concurrency() = %d, %d; want the counts reset", begun, overlapped)
	}
	go func() { <-b.entered }()
	raw.Unlink(nil, &fuse.InHeader{}, "y") // one at a time: not overlapped
	if begun, overlapped := m.Concurrency(); begun != 1 || overlapped != 0 || m.inflight.Load() != 0 {
		t.Errorf("after one request alone: %d begun, %d overlapped, %d in flight; want 1, 0, 0", begun, overlapped, m.inflight.Load())
	}
}

// TestServeWarnsWhenNotOnLoopback: the endpoint is unauthenticated, so listening beyond the loopback is
// said at start (WARN), naming the address and the fix; on the loopback nothing is said.
func TestServeWarnsWhenNotOnLoopback(t *testing.T) {
	type row struct {
		name, addr string
		warn       bool
		want       string // in the warning
	}
	rows := []row{
		{"loopback v4", "127.0.0.1:0", false, ""},
		{"localhost", "localhost:0", false, ""},
		{"every interface, no host", ":0", true, "every interface"},
		{"every interface v4", "0.0.0.0:0", true, "every interface"},
	}
	if l, err := net.Listen("tcp", "[::1]:0"); err == nil {
		l.Close()
		rows = append(rows, row{"loopback v6", "[::1]:0", false, ""})
	}
	if ip := nonLoopbackIP(); ip != "" {
		rows = append(rows, row{"one interface", net.JoinHostPort(ip, "0"), true, "address " + ip})
	}
	for _, r := range rows {
		t.Run(r.name, func(t *testing.T) {
			var buf bytes.Buffer
			log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			addr, err := New().Serve(ctx, r.addr, log)
			if err != nil {
				t.Fatal(err)
			}
			out := buf.String()
			if !r.warn {
				if out != "" {
					t.Errorf("listening on %s (%s) logged:\n%s", addr, r.addr, out)
				}
				return
			}
			for _, want := range []string{"level=WARN", r.want, "127.0.0.1", "protect it", "metrics_addr=" + r.addr, "bound=" + addr.String()} {
				if !strings.Contains(out, want) {
					t.Errorf("listening on %s (%s): the warning lacks %q:\n%s", addr, r.addr, want, out)
				}
			}
		})
	}
}

// nonLoopbackIP is an address of this host that is not on the loopback ("" if it has none).
func nonLoopbackIP() string {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return ""
	}
	for _, a := range as {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String()
		}
	}
	return ""
}
