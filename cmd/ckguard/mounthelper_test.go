package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMountHelper calls docs/mount.ckguard the way mount(8) calls a helper (mount.TYPE SPEC DIR [-sfnv]
// [-N NS] [-o OPTIONS] [-t TYPE]) and checks the ckguard command it runs and the exit status mount(8)
// documents: 0 mounted, 1 incorrect invocation, 32 mount failure. A stand-in binary records its
// arguments; the real binary checks that an unknown option (rejected by `ckguard mount`) is a mount
// failure. The real mount through mount(8) is integration's TestDocsFstab.
func TestMountHelper(t *testing.T) {
	helper, err := filepath.Abs(filepath.Join("..", "..", "docs", "mount.ckguard"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	fake := func(code string) string {
		p := filepath.Join(dir, "ckguard-exit-"+code)
		script := "#!/bin/sh\nprintf '%s\\n' \"$*\" > " + argsFile + "\nexit " + code + "\n"
		if err := os.WriteFile(p, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok, failing := fake("0"), fake("2")
	real := ""
	if !testing.Short() {
		real = builtBinary(t)
	}
	store, mnt := filepath.Join(dir, "store"), filepath.Join(dir, "mnt")
	for _, tc := range []struct {
		name     string
		bin      string
		args     []string
		want     int
		wantArgs string // the ckguard command line, "" when ckguard must not run
		wantErr  string
	}{
		{"fstab line", ok, []string{store, mnt, "-o", "rw,index=/var/lib/ckguard/flink,allow_other,_netdev,nofail"}, 0,
			"mount --store " + store + " --index /var/lib/ckguard/flink --allow-other " + mnt, ""},
		{"flags before -o, -t subtype, repeated map", ok, []string{store, mnt, "-n", "-t", "ckguard", "-o", "map=hdfs://nn/f=,map=s3a://b/f=,sync_interval=1m"}, 0,
			"mount --store " + store + " --map hdfs://nn/f= --map s3a://b/f= --sync-interval 1m " + mnt, ""},
		{"-o glued to its value", ok, []string{store, mnt, "-oindex=/i"}, 0, "mount --store " + store + " --index /i " + mnt, ""},
		{"fake mount (-f) runs nothing", ok, []string{store, mnt, "-fv", "-o", "index=/i"}, 0, "", "--index /i"},
		{"ckguard mount fails: mount failure", failing, []string{store, mnt, "-o", "index=/i"}, 32, "mount --store " + store + " --index /i " + mnt, ""},
		{"ro is unsupported: mount failure", ok, []string{store, mnt, "-o", "ro"}, 32, "", "ro is not supported"},
		{"usage: no mountpoint", ok, []string{store}, 1, "", "usage: mount.ckguard"},
		{"usage: -o without options", ok, []string{store, mnt, "-o"}, 1, "", "usage: mount.ckguard"},
		{"usage: unknown argument", ok, []string{store, mnt, "--bogus"}, 1, "", "unknown argument --bogus"},
		{"no binary", filepath.Join(dir, "missing"), []string{store, mnt}, 1, "", "is not an executable"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			os.Remove(argsFile)
			cmd := exec.Command(helper, tc.args...)
			cmd.Env = append(os.Environ(), "CKGUARD_BIN="+tc.bin)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tc.want {
				t.Errorf("mount.ckguard %v: exit %d, want %d\n%s", tc.args, code, tc.want, out)
			}
			got, _ := os.ReadFile(argsFile)
			if strings.TrimSpace(string(got)) != tc.wantArgs {
				t.Errorf("mount.ckguard %v ran ckguard %q, want %q", tc.args, strings.TrimSpace(string(got)), tc.wantArgs)
			}
			if !strings.Contains(string(out), tc.wantErr) {
				t.Errorf("mount.ckguard %v: output %q lacks %q", tc.args, out, tc.wantErr)
			}
		})
	}
	t.Run("unknown option, real ckguard: mount failure", func(t *testing.T) {
		if real == "" {
			t.Skip("builds the binary")
		}
		cmd := exec.Command(helper, store, mnt, "-o", "index="+filepath.Join(dir, "index")+",no_such_option=1")
		cmd.Env = append(os.Environ(), "CKGUARD_BIN="+real)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 32 || !strings.Contains(string(out), "no-such-option") {
			t.Errorf("mount.ckguard -o no_such_option=1: %v, want exit 32 naming the option\n%s", err, out)
		}
	})
}
