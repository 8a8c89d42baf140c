// Package monitoring holds no code: its tests check that the shipped alerting rules and Grafana dashboard
// work as shipped (promtool accepts and tests the rules; every metric they query is one ckguard exports,
// or one listed in futureMetrics).
package monitoring

import (
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

const (
	rulesFile     = "ckguard-rules.yml"
	rulesTestFile = "ckguard-rules.test.yml"
	dashboardFile = "ckguard-dashboard.json"
)

// futureMetrics are queried by the rules and the dashboard before ckguard exports them; each query of one
// is marked "not exported yet" where an operator reads it (rule annotation, panel description).
var futureMetrics = map[string]bool{}

// promtool finds promtool; outside CI a machine without it skips (scripts/setup.sh test installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promtool not found (CI=true): scripts/setup.sh test installs Debian's prometheus package, which ships it")
		}
		t.Skip("promtool not found: install Debian's prometheus package (scripts/setup.sh test) to test the alerting rules")
	}
	return p
}

func TestRulesPassPromtool(t *testing.T) {
	p := promtool(t)
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", rulesTestFile}} {
		out, err := exec.Command(p, args...).CombinedOutput()
		if err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

var (
	alertLine    = regexp.MustCompile(`(?m)^\s*- alert:\s*(\S+)\s*$`)
	alertnameKey = regexp.MustCompile(`^\s*alertname:\s*(\S+)\s*$`)
	expAlertsKey = regexp.MustCompile(`^\s*exp_alerts:\s*(\[\])?\s*$`)
)

// TestEveryAlertFiresAndStaysQuiet: each alert has a test case where it fires and one where it does not, so
// a rule that always or never fires fails promtool.
func TestEveryAlertFiresAndStaysQuiet(t *testing.T) {
	rules := read(t, rulesFile)
	tests := read(t, rulesTestFile)
	fires, quiet := map[string]bool{}, map[string]bool{}
	current := ""
	for _, line := range strings.Split(tests, "\n") {
		if m := alertnameKey.FindStringSubmatch(line); m != nil {
			current = m[1]
			continue
		}
		if m := expAlertsKey.FindStringSubmatch(line); m != nil && current != "" {
			if m[1] == "[]" {
				quiet[current] = true
			} else {
				fires[current] = true
			}
			current = ""
		}
	}
	alerts := alertLine.FindAllStringSubmatch(rules, -1)
	if len(alerts) == 0 {
		t.Fatalf("%s: no alerts found", rulesFile)
	}
	for _, a := range alerts {
		if !fires[a[1]] {
			t.Errorf("%s: no test case in %s where %s fires", rulesFile, rulesTestFile, a[1])
		}
		if !quiet[a[1]] {
			t.Errorf("%s: no test case in %s where %s stays quiet (exp_alerts: [])", rulesFile, rulesTestFile, a[1])
		}
	}
}

var ckguardMetric = regexp.MustCompile(`\bckguard_[a-z0-9_]+`)

// exported lists the metric names ckguard registers: every `Name: "ckguard_..."` in the module's non-test
// Go files.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	root := filepath.Join("..", "..")
	lit := regexp.MustCompile(`Name:\s*"(ckguard_[a-z0-9_]+)"`)
	names := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == ".tools" || strings.HasPrefix(d.Name(), ".") && path != root) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			names[m[1]] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, must := range []string{"ckguard_index_lag_seconds", "ckguard_refusals_total", "ckguard_delete_queue_length"} {
		if !names[must] {
			t.Fatalf("the scan of the module's sources found no %s: the scan is broken (found %v)", must, keys(names))
		}
	}
	return names
}

// dashboardExprs returns every "expr" of the dashboard's panels and templating, by panel title.
func dashboardExprs(t *testing.T) map[string][]string {
	t.Helper()
	var d struct {
		Panels []struct {
			Title       string `json:"title"`
			Type        string `json:"type"`
			Description string `json:"description"`
			Targets     []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Definition string `json:"definition"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(read(t, dashboardFile)), &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	out := map[string][]string{}
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q queries nothing", dashboardFile, p.Title)
		}
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				t.Errorf("%s: panel %q has an empty query", dashboardFile, p.Title)
			}
			out[p.Title] = append(out[p.Title], tg.Expr)
			for _, m := range ckguardMetric.FindAllString(tg.Expr, -1) {
				if futureMetrics[m] && !strings.Contains(p.Description, "Not exported by ckguard yet") {
					t.Errorf("%s: panel %q queries %s, which ckguard does not export yet, and its description does not say so", dashboardFile, p.Title, m)
				}
			}
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			out["templating"] = append(out["templating"], v.Definition)
		}
	}
	return out
}

func TestDashboardQueriesExportedMetrics(t *testing.T) {
	have := exported(t)
	queried := map[string]bool{}
	for title, exprs := range dashboardExprs(t) {
		for _, e := range exprs {
			for _, m := range ckguardMetric.FindAllString(e, -1) {
				m = base(m, have)
				queried[m] = true
				if !have[m] && !futureMetrics[m] {
					t.Errorf("%s: panel %q queries %s, which ckguard does not export (and futureMetrics does not list)", dashboardFile, title, m)
				}
			}
		}
	}
	// Every metric ckguard exports has a panel.
	for m := range have {
		if !queried[m] {
			t.Errorf("%s: no panel shows %s", dashboardFile, m)
		}
	}
}

func TestRulesQueryExportedMetrics(t *testing.T) {
	have := exported(t)
	rules := read(t, rulesFile)
	for _, m := range ckguardMetric.FindAllString(rules, -1) {
		m = base(m, have)
		if !have[m] && !futureMetrics[m] {
			t.Errorf("%s queries %s, which ckguard does not export (and futureMetrics does not list)", rulesFile, m)
		}
	}
	// Each alert on a future metric says so to the operator who receives it.
	blocks := alertLine.Split(rules, -1)[1:]
	names := alertLine.FindAllStringSubmatch(rules, -1)
	for i, b := range blocks {
		expr := b
		if j := strings.Index(b, "annotations:"); j >= 0 {
			expr = b[:j]
		}
		for _, m := range ckguardMetric.FindAllString(expr, -1) {
			if futureMetrics[m] && !strings.Contains(b, "Metric not exported by ckguard yet") {
				t.Errorf("%s: alert %s queries %s, which ckguard does not export yet, and its description does not say so", rulesFile, names[i][1], m)
			}
		}
	}
}

// TestDocsNameEveryAlert: the operator docs explain every shipped alert, and the README points at them.
func TestDocsNameEveryAlert(t *testing.T) {
	doc := read(t, "README.md")
	for _, a := range alertLine.FindAllStringSubmatch(read(t, rulesFile), -1) {
		if !strings.Contains(doc, a[1]) {
			t.Errorf("docs/monitoring/README.md does not explain alert %s", a[1])
		}
	}
	readme := read(t, filepath.Join("..", "..", "README.md"))
	for _, want := range []string{"docs/monitoring/ckguard-rules.yml", "docs/monitoring/ckguard-dashboard.json"} {
		if !strings.Contains(readme, want) {
			t.Errorf("README.md does not point at %s", want)
		}
	}
}

// base strips the series suffix of a histogram (name_bucket, name_sum, name_count) whose name is in have.
func base(m string, have map[string]bool) string {
	for _, s := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(m, s); ok && have[b] {
			return b
		}
	}
	return m
}

func read(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
