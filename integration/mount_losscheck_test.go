package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/refindex/treegen"
)

// TestMountLossCheck: a referenced object deleted directly on the store (local: os.Remove beside the
// mount; S3: `aws s3 rm` against the server) while the mount runs is reported by the first loss check
// pass that starts after the deletion (passes run 3/4 of the sync interval apart, so within two syncs):
// ckguard_broken_checkpoints and ckguard_missing_referenced_objects for its
// job, a WARN log line and an audit record naming the checkpoint and the file.
func TestMountLossCheck(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the mounted store and the extra mount flags, and a function that deletes a key
		// directly on the store.
		setup func(t *testing.T) (store string, tr *treegen.Tree, flags []string, remove func(key string))
	}{
		{"local", func(t *testing.T) (string, *treegen.Tree, []string, func(string)) {
			tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tr.Root, tr, nil, func(key string) {
				if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(key))); err != nil {
					t.Fatal(err)
				}
			}
		}},
		{"s3", func(t *testing.T) (string, *treegen.Tree, []string, func(string)) {
			e := s3Start(t)
			tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
			return s3Root, tr, e.mountArgs(), func(key string) {
				mntMust(t, "/usr/bin/aws", "--endpoint-url", e.srv.Endpoint, "s3", "rm", "--only-show-errors", s3Root+"/"+key)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, tr, flags, remove := tc.setup(t)
			addr := freePort(t)
			p := mntStart(t, store, "", append(flags, "--metrics-addr", addr, "--sync-interval", "2s")...)
			metricsURL := "http://" + addr + "/metrics"
			syncs := func() float64 {
				v, _ := metricValue(mntHTTPGet(t, metricsURL), "ckguard_sync_duration_seconds_count")
				return v
			}
			// The first complete check of the intact store: every job at 0.
			deadline := time.Now().Add(60 * time.Second)
			for {
				text := mntHTTPGet(t, metricsURL)
				if age, ok := metricValue(text, "ckguard_loss_check_age_seconds"); ok && age >= 0 {
					if v, _ := metricValue(text, "ckguard_missing_referenced_objects"); v != 0 {
						t.Fatalf("intact store reports missing objects:\n%s", text)
					}
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no complete loss check in 60s:\n%s", p.logText())
				}
				time.Sleep(100 * time.Millisecond)
			}

			ref := tr.Referenced()[0]
			// Seen through the mount just before (as a reading job would): a cached answer must not hide
			// the deletion.
			if _, err := os.Stat(p.m(ref)); err != nil {
				t.Fatal(err)
			}
			remove(ref) // aws-cli takes seconds to start: count from when it is done
			before := syncs()
			t0 := time.Now()
			var rec *audit.Record
			deadline = time.Now().Add(60 * time.Second)
			for rec == nil {
				for _, r := range p.auditRecords() {
					if r.Op == "loss-check" && r.Path == ref {
						rec = &r
						break
					}
				}
				if rec == nil {
					if time.Now().After(deadline) {
						t.Fatalf("no audit record for %s deleted beside the mount in 60s:\n%s", ref, p.logText())
					}
					time.Sleep(100 * time.Millisecond)
				}
			}
			// One sync may have been running when the object went (its check may have stat'ed it before):
			// the next one must find it.
			took := time.Since(t0)
			n := syncs() - before
			text := mntHTTPGet(t, metricsURL)
			bound, ok := metricValue(text, "ckguard_loss_check_bound_seconds")
			t.Logf("%s: loss reported %v after the deletion, %.0f sync(s) later; advertised bound %.1fs", tc.name, took.Round(time.Millisecond), n, bound)
			if n > 2 {
				t.Errorf("loss of %s reported after %.0f syncs, want the first sync that started after it", ref, n)
			}
			// The advertised bound holds (the period plus a chunk at this small store), give or take the
			// syncs' own durations on a loaded machine.
			if !ok || bound <= 0 || took.Seconds() > bound+2 {
				t.Errorf("loss reported after %s, ckguard_loss_check_bound_seconds = %v (%v): the bound must hold", took.Round(time.Millisecond), bound, ok)
			}
			if !strings.Contains(p.logText(), "a loss shows within") {
				t.Errorf("no INFO line stating the detection bound:\n%s", p.logText())
			}
			if rec.Decision != "missing" || len(rec.Referencing) != 1 || !strings.Contains(rec.Message, rec.Referencing[0]) || !strings.Contains(rec.Message, ref) {
				t.Errorf("audit record: %+v", rec)
			}
			meta := rec.Referencing[0]
			job := path.Dir(path.Dir(meta))
			label := `job="` + job + `"`
			if v, ok := metricValue(text, "ckguard_missing_referenced_objects", label); !ok || v < 1 {
				t.Errorf("ckguard_missing_referenced_objects{%s} = %v (%v):\n%s", label, v, ok, text)
			}
			if v, ok := metricValue(text, "ckguard_broken_checkpoints", label); !ok || v < 1 {
				t.Errorf("ckguard_broken_checkpoints{%s} = %v (%v)", label, v, ok)
			}
			promtoolFires(t, text, "ckguard_broken_checkpoints", label, "CkguardBrokenCheckpoint")
			if log := p.logText(); !strings.Contains(log, "level=WARN") || !strings.Contains(log, "is missing from the store") || !strings.Contains(log, meta) {
				t.Errorf("no WARN line naming %s and %s:\n%s", ref, meta, log)
			}
		})
	}
}

// promtoolFires runs `promtool test rules` on the shipped rules with the series name{label} exactly as the
// mount exported it (scraped by a job "ckguard": Prometheus renames the mount's job label to
// exported_job), and checks that alert fires on it.
func promtoolFires(t *testing.T, exposition, name, label, alert string) {
	t.Helper()
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Logf("promtool not installed: the alert is not tested on the exported series")
		return
	}
	var series string
	for _, l := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(l, name+"{") && strings.Contains(l, label) {
			series = l
		}
	}
	if series == "" {
		t.Fatalf("no %s{%s} in the exposition", name, label)
	}
	sel, val, _ := strings.Cut(series, " ")
	scraped := strings.Replace(sel, "{job=", `{instance="mount:9477",job="ckguard",exported_job=`, 1)
	labels := strings.TrimSuffix(strings.TrimPrefix(scraped, name+"{"), "}")
	dir := t.TempDir()
	test := fmt.Sprintf(`rule_files: [%q]
evaluation_interval: 1m
tests:
  - interval: 1m
    input_series:
      - series: %q
        values: '%sx10'
    promql_expr_test:
      - expr: ALERTS{alertname=%q}
        eval_time: 5m
        exp_samples:
          - labels: %q
            value: 1
`, filepath.Join(mntRepoRoot(t), "docs", "monitoring", "ckguard-rules.yml"), scraped, val, alert,
		`ALERTS{alertname="`+alert+`",alertstate="firing",severity="critical",`+labels+`}`)
	f := filepath.Join(dir, "loss.test.yml")
	if err := os.WriteFile(f, []byte(test), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "test", "rules", f).CombinedOutput(); err != nil {
		t.Errorf("%s does not fire on the exported series %s: %v\n%s\n%s", alert, series, err, out, test)
	}
}

// TestMountRestoreMetadata: a _metadata deleted directly on the store while the mount runs (local:
// os.Remove; S3: aws s3 rm) is listed as retired by `ckguard checkpoints --history` (answered by the
// mount), and `ckguard restore-metadata` puts it back through the mount's control socket:
// byte-identical, indexed at once (a file only it references is refused again), and a second restore
// refuses to overwrite.
func TestMountRestoreMetadata(t *testing.T) {
	for _, tc := range []struct {
		name string
		// setup returns the mounted store, the tree, extra flags (mount and CLI), and functions that
		// delete and read a key directly on the store.
		setup func(t *testing.T) (store string, tr *treegen.Tree, flags []string, remove func(string), read func(string) []byte)
	}{
		{"local", func(t *testing.T) (string, *treegen.Tree, []string, func(string), func(string) []byte) {
			tr, err := treegen.IncidentTwo(filepath.Join(t.TempDir(), "store"), time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return tr.Root, tr, nil, func(key string) {
					if err := os.Remove(filepath.Join(tr.Root, filepath.FromSlash(key))); err != nil {
						t.Fatal(err)
					}
				}, func(key string) []byte {
					b, _ := os.ReadFile(filepath.Join(tr.Root, filepath.FromSlash(key)))
					return b
				}
		}},
		{"s3", func(t *testing.T) (string, *treegen.Tree, []string, func(string), func(string) []byte) {
			e := s3Start(t)
			tr := e.tree(t, incident{"IncidentTwo", treegen.IncidentTwo}, s3Root)
			return s3Root, tr, e.mountArgs(), func(key string) {
					mntMust(t, "/usr/bin/aws", "--endpoint-url", e.srv.Endpoint, "s3", "rm", "--only-show-errors", s3Root+"/"+key)
				}, func(key string) []byte {
					b, _ := os.ReadFile(filepath.Join(e.srv.DataDir, s3Bucket, s3Prefix, filepath.FromSlash(key)))
					return b
				}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			store, tr, flags, remove, read := tc.setup(t)
			p := mntStart(t, store, "", flags...)
			cli := func(args ...string) (string, int) {
				return p.cli(append(append([]string{args[0]}, flags...), args[1:]...)...)
			}
			// A live checkpoint's _metadata and a file only it references.
			var meta, only string
			for _, ref := range tr.Referenced() {
				w, _ := cli("why", "--json", ref)
				var why struct {
					Referencing []string `json:"referencing"`
				}
				if json.Unmarshal([]byte(w), &why) == nil && len(why.Referencing) == 1 && !strings.HasSuffix(ref, "_metadata") {
					meta, only = why.Referencing[0], ref
					break
				}
			}
			if meta == "" {
				t.Fatal("no file referenced by exactly one checkpoint")
			}
			orig := read(meta)
			if len(orig) == 0 {
				t.Fatalf("cannot read %s from the store", meta)
			}
			remove(meta)
			deadline := time.Now().Add(60 * time.Second)
			for {
				out, code := cli("checkpoints", "--history")
				if i := strings.Index(out, meta+"  "); code == 0 && i >= 0 && strings.Contains(strings.SplitN(out[i:], "\n", 2)[0], "retired 20") {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s not listed as retired in 60s (exit %d):\n%s", meta, code, out)
				}
				time.Sleep(200 * time.Millisecond)
			}
			out, code := cli("restore-metadata", path.Dir(meta))
			if code != 0 || !strings.Contains(out, "indexed") {
				t.Fatalf("restore-metadata (exit %d):\n%s", code, out)
			}
			if got := read(meta); string(got) != string(orig) {
				t.Fatalf("restored %s differs from the original (%d bytes, want %d)", meta, len(got), len(orig))
			}
			if err := os.Remove(p.m(only)); err == nil {
				t.Fatalf("%s, referenced only by the restored %s, deleted through the mount", only, meta)
			}
			if out, code := cli("restore-metadata", meta); code == 0 || !strings.Contains(out, "never overwritten") {
				t.Fatalf("second restore-metadata (exit %d):\n%s", code, out)
			}
		})
	}
}
