package flinkmeta

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite testdata/golden from the current parser")

// GoldenLocation is the location golden summaries resolve relative references against, so the
// files do not depend on where the fixtures are checked out.
func goldenLocation(rel string) string { return "/fixtures/" + rel + "/_metadata" }

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// goldenFixtures picks one fixture per (format version, backend), the first by directory name.
func goldenFixtures(t *testing.T) []fixture {
	fx := append([]fixture(nil), loadFixtures(t)...)
	sort.Slice(fx, func(i, j int) bool { return fx[i].rel < fx[j].rel })
	seen := map[string]bool{}
	var out []fixture
	for _, f := range fx {
		v := int(f.data[7])
		if v < 2 {
			continue
		}
		key := string(rune('0'+v)) + "|" + f.backend
		if !seen[key] {
			seen[key] = true
			out = append(out, f)
		}
	}
	return out
}

func goldenName(f fixture) string {
	return "v" + string(rune('0'+f.data[7])) + "_" + strings.Trim(unsafeName.ReplaceAllString(f.backend, "-"), "-") + ".json"
}

// GoldenJSON renders the inspect --json summary exactly as the CLI prints it.
func GoldenJSON(m *Metadata, location string) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(m.Summarize(location)); err != nil {
		panic(err)
	}
	return b.Bytes()
}

func TestGoldenSummaries(t *testing.T) {
	fx := goldenFixtures(t)
	if len(fx) < 20 {
		t.Fatalf("only %d (version, backend) pairs among the fixtures", len(fx))
	}
	dir := filepath.Join("testdata", "golden")
	index := map[string]string{}
	for _, f := range fx {
		m, err := ParseBytes(f.data, f.path, Options{})
		if err != nil {
			t.Fatalf("%s: %v", f.rel, err)
		}
		got := GoldenJSON(m, goldenLocation(f.rel))
		name := goldenName(f)
		index[name] = f.rel
		path := filepath.Join(dir, name)
		if *update {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%s: %v (run go test -run TestGoldenSummaries -update)", f.rel, err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: summary differs from %s (run with -update after checking the change)", f.rel, path)
		}
	}
	idx, _ := json.MarshalIndent(index, "", "  ")
	idx = append(idx, '\n')
	if *update {
		if err := os.WriteFile(filepath.Join(dir, "INDEX.json"), idx, 0o644); err != nil {
			t.Fatal(err)
		}
	} else if want, err := os.ReadFile(filepath.Join(dir, "INDEX.json")); err != nil || !bytes.Equal(want, idx) {
		t.Errorf("testdata/golden/INDEX.json (golden file → fixture) is stale: %v", err)
	}
}
