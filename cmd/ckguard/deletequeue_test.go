package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/deleteq"
)

// TestPendingDeletesShown: deletions an S3 mount acknowledged and has not applied yet (its journal in the
// index directory) show in `ckguard stats`, and `ckguard orphans` leaves their objects out (they are gone
// from the mount) and says how many.
func TestPendingDeletesShown(t *testing.T) {
	tree, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"junk/a", "junk/b"} {
		if err := tree.Write(k, 10, time.Now().Add(-30*24*time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	idx := filepath.Join(t.TempDir(), "index")
	args := []string{"--store", tree.Root, "--index", idx, "--grace", "0s"}
	out, code := run(t, append([]string{"orphans", "--json"}, args...)...)
	var res refindex.OrphansResult
	if err := json.Unmarshal([]byte(out), &res); err != nil || code != 0 || len(res.Files) < 2 {
		t.Fatalf("orphans: %v (code %d): %s", err, code, out)
	}
	queued := res.Files[0]
	line := fmt.Sprintf(`{"op":"q","id":7,"key":%q,"etag":"e","at":%q}`+"\n"+`{"op":"f","id":7,"err":"S3 DeleteObjects: SlowDown"}`+"\n",
		queued.Path, time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano))
	if err := os.WriteFile(filepath.Join(idx, deleteq.JournalName), []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, append([]string{"stats"}, args...)...)
	if !strings.Contains(out, "pending deletions") || !strings.Contains(out, "1 acknowledged") || !strings.Contains(out, "SlowDown") {
		t.Errorf("stats does not show the pending deletion:\n%s", out)
	}
	out, _ = run(t, append([]string{"orphans"}, args...)...)
	if strings.Contains(out, queued.Path) || !strings.Contains(out, "1 more whose deletion") {
		t.Errorf("orphans lists a queued object or does not say so:\n%s", out)
	}
	if want := plural(len(res.Files)-1, "orphaned object") + ","; !strings.Contains(out, want) {
		t.Errorf("orphans: want %q:\n%s", want, out)
	}
}
