package integration

import (
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountMetricsWarnsOffLoopback: the metrics endpoint has no authentication, so a mount whose
// --metrics-addr listens beyond the loopback says so at start (WARN, naming the address and the fix:
// bind it to 127.0.0.1 or protect it); on 127.0.0.1 it says nothing. Either way it serves.
func TestMountMetricsWarnsOffLoopback(t *testing.T) {
	mntRequire(t)
	tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		name string
		addr func(t *testing.T) string
		warn bool
	}{
		{"loopback", freePort, false},
		{"every interface", func(t *testing.T) string { return "0.0.0.0:" + strings.Split(freePort(t), ":")[1] }, true},
	} {
		t.Run(r.name, func(t *testing.T) {
			addr := r.addr(t)
			p := mntStart(t, tr.Root, "", "--metrics-addr", addr)
			port := addr[strings.LastIndex(addr, ":")+1:]
			resp, err := http.Get("http://127.0.0.1:" + port + "/metrics")
			if err != nil {
				t.Fatalf("metrics on %s: %v", addr, err)
			}
			resp.Body.Close()
			p.stop()
			var warning string
			for _, l := range strings.Split(p.logText(), "\n") {
				if strings.Contains(l, "metrics endpoint listens on") {
					warning = l
				}
			}
			switch {
			case r.warn && warning == "":
				t.Fatalf("--metrics-addr %s: no warning in the mount's log:\n%s", addr, p.logText())
			case r.warn:
				for _, want := range []string{"level=WARN", "every interface", "metrics_addr=" + addr, "bind it to 127.0.0.1", "protect it"} {
					if !strings.Contains(warning, want) {
						t.Errorf("the warning lacks %q: %s", want, warning)
					}
				}
			case warning != "":
				t.Errorf("--metrics-addr %s (loopback) warned: %s", addr, warning)
			}
		})
	}
}
