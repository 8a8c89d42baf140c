package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTestTargetNeedsNoJava: `make test` installs and runs only what the test suite needs. Java,
// Maven, the Flink artifacts, s3fs and rclone belong to make e2e and make bench (CI also runs make
// test with java and mvn shadowed by failing stand-ins, .ci/run).
func TestTestTargetNeedsNoJava(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("make not installed")
	}
	forbidden := []string{"openjdk", "maven", "mvn", "java", "prefetch", "flink-artifacts", "s3fs", "rclone", "setup.sh all", "setup.sh e2e", "setup.sh bench"}
	dry, err := exec.Command("make", "-C", root, "-n", "test").CombinedOutput()
	if err != nil {
		t.Fatalf("make -n test: %v\n%s", err, dry)
	}
	list, err := exec.Command(filepath.Join(root, "scripts", "setup.sh"), "--list", "test").CombinedOutput()
	if err != nil {
		t.Fatalf("setup.sh --list test: %v\n%s", err, list)
	}
	for what, out := range map[string]string{"make -n test": string(dry), "setup.sh --list test": string(list)} {
		for _, f := range forbidden {
			if strings.Contains(out, f) {
				t.Errorf("%s mentions %q:\n%s", what, f, out)
			}
		}
	}
	if !strings.Contains(string(dry), "setup.sh test") {
		t.Errorf("make test does not set up the test profile:\n%s", dry)
	}
	for _, want := range []string{"package fuse3", "step versitygw"} {
		if !strings.Contains(string(list), want) {
			t.Errorf("setup.sh --list test lacks %q:\n%s", want, list)
		}
	}
	// The targets that need the rest still install it.
	for target, want := range map[string]string{"demo": "package graphviz", "e2e": "step flink-artifacts", "bench": "package rclone", "all": "package maven"} {
		out, err := exec.Command(filepath.Join(root, "scripts", "setup.sh"), "--list", target).CombinedOutput()
		if err != nil || !strings.Contains(string(out), want) {
			t.Errorf("setup.sh --list %s: %v, lacks %q:\n%s", target, err, want, out)
		}
	}
}
