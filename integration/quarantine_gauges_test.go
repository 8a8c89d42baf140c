package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestQuarantineGauges: on every store the mount's quarantine gauges follow the area: after rm -rf
// stages a whole store they count its entries and their bytes and age the oldest entry, and after the
// restore of everything they fall back to zero. The alert rules on a filling quarantine and a purge
// that falls behind read exactly these series.
func TestQuarantineGauges(t *testing.T) {
	forEachQBackend(t, func(t *testing.T, s *qStore) {
		addr := freePort(t)
		s.wrongPolicy = append(append([]string(nil), s.wrongPolicy...), "--metrics-addr", addr)
		p, _, es := wipeWithWrongPolicy(t, s, nil)
		var bytes int64
		for _, e := range es {
			bytes += e.Size
		}
		// The gauges are refreshed after every sync (1 s in these mounts).
		waitGauges := func(what string, objects int, bytes int64, oldest func(float64) bool) {
			t.Helper()
			var text string
			for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
				text = mntHTTPGet(t, "http://"+addr+"/metrics")
				o, ok1 := metricValue(text, "ckguard_quarantine_objects")
				b, ok2 := metricValue(text, "ckguard_quarantine_bytes")
				age, ok3 := metricValue(text, "ckguard_quarantine_oldest_seconds")
				if ok1 && ok2 && ok3 && o == float64(objects) && b == float64(bytes) && oldest(age) {
					return
				}
			}
			var got []string
			for _, l := range strings.Split(text, "\n") {
				if strings.HasPrefix(l, "ckguard_quarantine_") {
					got = append(got, l)
				}
			}
			t.Fatalf("%s: quarantine gauges after 60 s:\n%s\nwant %d objects, %d bytes", what, strings.Join(got, "\n"), objects, bytes)
		}
		waitGauges(fmt.Sprintf("after rm -rf staged %d files", len(es)), len(es), bytes, func(age float64) bool { return age > 0 && age < 3600 })
		if out, code := qcli(p, "restore", "--since", "1h"); code != 0 {
			t.Fatalf("restore --since 1h: exit %d\n%s", code, out)
		}
		waitGauges("after restoring everything", 0, 0, func(age float64) bool { return age == 0 })
	})
}
