package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestHDFSKerberosExampleFlags: every flag the Kerberos example's systemd environment and fstab line
// hand to `ckguard mount` is one the mount takes (an fstab option is a flag without its dashes,
// underscores for dashes; mount(8)'s own options are not passed on), so the example cannot drift from
// the command it documents.
func TestHDFSKerberosExampleFlags(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "hdfs-kerberos.example"))
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range mountCommand().Flags {
		for _, n := range f.Names() {
			known[n] = true
		}
	}
	var used []string
	sawOpts, sawFstab := false, false
	for _, l := range strings.Split(string(b), "\n") {
		if _, opts, ok := strings.Cut(l, "CKGUARD_OPTS="); ok {
			sawOpts = true
			for _, m := range regexp.MustCompile(`(?:^|\s)--([a-z0-9-]+)`).FindAllStringSubmatch(opts, -1) {
				used = append(used, m[1])
			}
		}
		if f := strings.Fields(l); len(f) >= 4 && strings.HasPrefix(f[0], "hdfs://") && f[2] == "ckguard" {
			sawFstab = true
			for _, o := range strings.Split(f[3], ",") {
				name, _, _ := strings.Cut(o, "=")
				if name == "_netdev" || name == "nofail" || name == "defaults" || name == "noauto" {
					continue
				}
				used = append(used, strings.ReplaceAll(name, "_", "-"))
			}
		}
	}
	if !sawOpts || !sawFstab || len(used) < 4 {
		t.Fatalf("the example's CKGUARD_OPTS line (found %v) or fstab line (found %v) is gone; flags seen: %v", sawOpts, sawFstab, used)
	}
	for _, n := range used {
		if !known[n] {
			t.Errorf("docs/hdfs-kerberos.example passes --%s, which ckguard mount does not take", n)
		}
	}
}
