package layers

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
)

const module = "github.com/ckguard/ckguard/"

// layer is a rank: a package may import packages of its own rank or a lower one, never a higher one.
// Backends (rank backend) may in addition not import each other: a local, S3 or HDFS package imports
// only the shared framework below it and its own backend's packages.
type layer int

const (
	leaf      layer = iota // parser, names, vocabulary, small helpers: import nothing of ckguard but leaves
	storage                // the storage interface the index sees, and its conformance suite
	index                  // the reference index
	framework              // the guard, audit, metrics, control socket, shared daemon: any backend's mount
	backend                // one store kind each: local, S3, HDFS
	command                // the CLI and what only the CLI runs
	test                   // integration tests and test-only programs
)

func (l layer) String() string {
	return [...]string{"leaf", "storage", "index", "framework", "backend", "command", "test"}[l]
}

// rules maps a package path prefix (below the module) to its layer. The longest matching prefix wins,
// so a sub-package can sit in another layer than its parent.
var rules = []struct {
	prefix string
	layer  layer
}{
	{"internal/", leaf},
	{"refindex/flinkmeta", leaf},
	{"refindex/flinklayout", leaf},
	{"refindex/pathnorm", leaf},
	{"refindex/verdict", leaf},
	{"refindex/pace", leaf},
	{"refindex/treegen", leaf},
	{"refindex/store", storage},
	{"refindex/store/quarantine", storage},
	{"refindex", index},
	{"fs/", framework},
	{"fs/internal/cmd", test},
	{"localbackend", backend},
	{"s3backend", backend},
	{"s3backend/internal/cmd", test},
	{"s3backend/s3test", test},
	{"hdfsbackend", backend},
	{"hdfsbackend/hdfstest", test},
	{"cmd/", command},
	{"integration", test},
	{"docs", test},
}

// backendOf names the store kind a backend package belongs to ("" for other layers).
func backendOf(pkg string) string {
	switch {
	case strings.HasPrefix(pkg, "s3backend"):
		return "s3"
	case strings.HasPrefix(pkg, "hdfsbackend"):
		return "hdfs"
	case strings.HasPrefix(pkg, "localbackend"):
		return "local"
	}
	return ""
}

func layerOf(pkg string) (layer, bool) {
	best, found := -1, false
	var l layer
	for _, r := range rules {
		p := strings.TrimSuffix(r.prefix, "/")
		if (pkg == p || strings.HasPrefix(pkg, p+"/")) && len(p) > best {
			best, l, found = len(p), r.layer, true
		}
	}
	return l, found
}

// allowedBackward lists the imports that still run the wrong way, each with the step that removes it.
// The test fails when one of them disappears (so the list only shrinks) and when a new one appears.
// None is left: every backend's daemon is in its own backend (localbackend/localguardd for local stores).
var allowedBackward = map[string]string{}

// backwardImports returns, for go list lines "pkg imp imp ...", the imports that run back up (minus
// allowed), the packages with no layer, the allowed edges seen, and the number of module packages.
func backwardImports(lines []string, allowed map[string]string) (bad, unplaced []string, seen map[string]bool, packages int) {
	seen = map[string]bool{}
	for _, line := range lines {
		fields := strings.Fields(line)
		if len(fields) == 0 || !strings.HasPrefix(fields[0], module) {
			continue
		}
		packages++
		pkg := strings.TrimPrefix(fields[0], module)
		from, ok := layerOf(pkg)
		if !ok {
			unplaced = append(unplaced, pkg)
			continue
		}
		for _, imp := range fields[1:] {
			if !strings.HasPrefix(imp, module) {
				continue
			}
			dep := strings.TrimPrefix(imp, module)
			to, ok := layerOf(dep)
			if !ok {
				continue // reported as its own package
			}
			backward := to > from || (from == backend && to == backend && backendOf(pkg) != backendOf(dep))
			if !backward {
				continue
			}
			edge := pkg + " -> " + dep
			if _, ok := allowed[edge]; ok {
				seen[edge] = true
				continue
			}
			bad = append(bad, fmt.Sprintf("%s: a %s package imports a %s package", edge, from, to))
		}
	}
	return bad, unplaced, seen, packages
}

func TestNoImportRunsBackUp(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	bad, unplaced, seen, packages := backwardImports(lines, allowedBackward)
	if packages < 20 {
		t.Fatalf("go list gave %d packages; expected the whole module", packages)
	}
	for _, b := range bad {
		t.Errorf("%s; move the shared part down or the caller up", b)
	}
	for _, pkg := range unplaced {
		t.Errorf("package %s has no layer: add it to the rules in internal/layers/layers_test.go and to docs/DEVELOPING.md's layout", pkg)
	}
	for edge, why := range allowedBackward {
		if !seen[edge] {
			t.Errorf("%s is listed as an allowed backward import (%s) but is gone: remove it from allowedBackward", edge, why)
		}
	}
}

// The check itself: an index package importing a mount, a leaf importing the index, and one backend
// importing another are each found; the allowed edge is not reported.
func TestBackwardImportsFound(t *testing.T) {
	lines := []string{
		module + "refindex " + module + "fs/guard " + module + "refindex/store fmt",
		module + "internal/bytesize " + module + "refindex",
		module + "s3backend/s3mount " + module + "hdfsbackend/hdfsclient " + module + "fs/guard",
		module + "fs/guardd " + module + "localbackend/localfs",
		module + "nowhere/pkg",
	}
	bad, unplaced, seen, n := backwardImports(lines, map[string]string{"fs/guardd -> localbackend/localfs": "x"})
	if n != 5 || len(bad) != 3 || len(unplaced) != 1 || !seen["fs/guardd -> localbackend/localfs"] {
		t.Fatalf("got bad=%q unplaced=%q seen=%v n=%d", bad, unplaced, seen, n)
	}
}

func TestLayerRules(t *testing.T) {
	for _, c := range []struct {
		pkg  string
		want layer
	}{
		{"internal/bytesize", leaf},
		{"refindex", index},
		{"refindex/flinkmeta", leaf},
		{"refindex/store", storage},
		{"localbackend/localstore", backend},
		{"fs/guard", framework},
		{"fs/guardd", framework},
		{"localbackend/localfs", backend},
		{"localbackend/localhold", backend},
		{"s3backend/s3mount", backend},
		{"cmd/ckguard/demo", command},
		{"integration", test},
	} {
		if got, ok := layerOf(c.pkg); !ok || got != c.want {
			t.Errorf("layerOf(%s) = %v, %v; want %v", c.pkg, got, ok, c.want)
		}
	}
	if _, ok := layerOf("refindexx"); ok {
		t.Errorf("refindexx matched a rule: prefixes must match whole path elements")
	}
}
