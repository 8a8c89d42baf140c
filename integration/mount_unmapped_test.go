package integration

import (
	"encoding/json"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// flinkRef is one reference of a real Flink `_metadata`, as Flink's own loader listed it
// (expected-references.json beside it, see testdata/flink/MANIFEST.md).
type flinkRef struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
}

// relocatedFlinkStore copies a real Flink store (testdata/flink/<version>/<scenario>/store) to another
// path, as `cp -a store elsewhere` or an NFS export of Flink's directory would show it, with every file
// backdated by age. It returns the copy and, per `_metadata` key, the store keys Flink's loader says it
// references (file and segment handles: directory handles may name folders git does not keep).
func relocatedFlinkStore(t *testing.T, version, scenario string, age time.Duration) (string, map[string][]string) {
	t.Helper()
	src := filepath.Join(mntRepoRoot(t), "testdata", "flink", version, scenario, "store")
	dst := filepath.Join(t.TempDir(), "srv", "flink", "checkpoints")
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", src, dst).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
	prefix := "file:/tmp/ckguard-fixtures/" + version + "/" + scenario + "/store/"
	refs := map[string][]string{}
	when := time.Now().Add(-age)
	for _, k := range mntFiles(t, dst) {
		p := filepath.Join(dst, k)
		if err := os.Chtimes(p, when, when); err != nil {
			t.Fatal(err)
		}
		if path.Base(k) != "expected-references.json" {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var doc struct {
			References []flinkRef `json:"references"`
		}
		if err := json.Unmarshal(b, &doc); err != nil {
			t.Fatalf("%s: %v", k, err)
		}
		meta := path.Join(path.Dir(k), "_metadata")
		for _, r := range doc.References {
			if !strings.HasPrefix(r.Path, prefix) {
				continue
			}
			rel := strings.TrimPrefix(r.Path, prefix)
			if r.Kind == "directory" {
				// Empty managed folders of file merging, which git does not keep: Flink had them.
				if err := os.MkdirAll(filepath.Join(dst, rel), 0o755); err != nil {
					t.Fatal(err)
				}
				continue
			}
			refs[meta] = append(refs[meta], rel)
		}
	}
	// A checkpoint Flink left behind without its files (file merging's CLAIM restore deletes the claimed
	// checkpoint's physical files but not every _metadata) is broken in the original too: not this test's
	// subject.
	for meta, rs := range refs {
		for _, r := range rs {
			if _, err := os.Stat(filepath.Join(dst, r)); err != nil {
				t.Logf("%s is broken in the fixture (%s missing): removed from the copy", meta, r)
				if err := os.Remove(filepath.Join(dst, meta)); err != nil {
					t.Fatal(err)
				}
				delete(refs, meta)
				break
			}
		}
	}
	return dst, refs
}

// lostReferences lists, for every `_metadata` still in store, the referenced files that are gone.
func lostReferences(t *testing.T, store string, refs map[string][]string) []string {
	t.Helper()
	var lost []string
	for meta, rs := range refs {
		if _, err := os.Stat(filepath.Join(store, meta)); err != nil {
			continue // retired by the cleanup
		}
		for _, r := range rs {
			if _, err := os.Stat(filepath.Join(store, r)); err != nil {
				lost = append(lost, meta+" → "+r)
			}
		}
	}
	sort.Strings(lost)
	return lost
}

// oldJobs are the job folders other jobs' checkpoints reference (the folders a cleanup "knows" are dead).
func oldJobs(refs map[string][]string) []string {
	set := map[string]bool{}
	for meta, rs := range refs {
		own := strings.SplitN(meta, "/", 2)[0]
		for _, r := range rs {
			if j := strings.SplitN(r, "/", 2)[0]; j != own {
				set[j] = true
			}
		}
	}
	var out []string
	for j := range set {
		out = append(out, j)
	}
	sort.Strings(out)
	return out
}

// TestMountRelocatedFlinkStores: the real Flink stores, copied to another path and mounted without --map.
// The store proves where the references live (the files are at the same relative place), so rm -rf of
// the old jobs and find -mtime +7 -delete keep every file a remaining checkpoint references; why says
// the mapping was inferred; verify is green because everything was checked.
func TestMountRelocatedFlinkStores(t *testing.T) {
	mntRequire(t)
	for _, tc := range []struct{ version, scenario string }{
		{"1.20", "incremental"}, {"2.0", "incremental"}, {"2.2", "incremental"}, {"2.2", "changelog"}, {"2.2", "file-merging"},
	} {
		t.Run(tc.version+"/"+tc.scenario, func(t *testing.T) {
			store, refs := relocatedFlinkStore(t, tc.version, tc.scenario, 10*24*time.Hour)
			inferred := "file:/tmp/ckguard-fixtures/" + tc.version + "/" + tc.scenario + "/store="
			// The newest checkpoint of every job stays protected (it is 10 days old): what a cleanup
			// may not take is what those checkpoints need.
			p := mntStart(t, store, "", "--active-window", "720h")
			if !strings.Contains(p.logText(), inferred) {
				t.Errorf("the mount did not say which mapping it inferred (%s):\n%s", inferred, p.logText())
			}
			out, code := p.cli("stats", "--json")
			if code != 0 || !strings.Contains(out, `"`+inferred+`"`) || !strings.Contains(out, `"unmapped_references": 0`) {
				t.Errorf("stats: exit %d\n%s", code, out)
			}
			jobs := oldJobs(refs)
			if tc.scenario == "incremental" && len(jobs) == 0 {
				t.Fatal("the incremental scenario has no cross-job references")
			}
			for _, j := range jobs {
				// A file of the old job that another job's checkpoint needs: refused, and why says how the
				// reference was tied to the store.
				var needed string
				for meta, rs := range refs {
					for _, r := range rs {
						if strings.HasPrefix(r, j+"/") && !strings.HasPrefix(meta, j+"/") {
							needed = r
						}
					}
				}
				out, code := p.cli("why", p.m(needed))
				if code != 1 || !strings.Contains(out, "mapping "+inferred+" is applied") {
					t.Errorf("why %s: exit %d\n%s", needed, code, out)
				}
				mntRun(t, "", "rm", "-rf", p.m(j))
			}
			if lost := lostReferences(t, store, refs); len(lost) > 0 {
				t.Errorf("rm -rf of the old jobs %v through the mount lost referenced files:\n%s", jobs, strings.Join(lost, "\n"))
			}
			mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
			if lost := lostReferences(t, store, refs); len(lost) > 0 {
				t.Errorf("find -mtime +7 -delete through the mount lost referenced files:\n%s", strings.Join(lost, "\n"))
			}
			out, code = p.cli("verify")
			if code != 0 || !strings.Contains(out, "verify OK") || !strings.Contains(out, "(0 unmapped") {
				t.Errorf("verify after the guarded cleanups: exit %d\n%s", code, out)
			}
		})
	}
}

// TestMountUnprovableFlinkStore: the relocated real store with one referenced file lost before the mount,
// so the store no longer proves where that checkpoint's references live. Every file that could be one of
// them is refused (the refusal names the --map to add), garbage still goes, and verify and orphans say
// they cannot be trusted (exit 3).
func TestMountUnprovableFlinkStore(t *testing.T) {
	mntRequire(t)
	store, refs := relocatedFlinkStore(t, "2.2", "incremental", 10*24*time.Hour)
	var lostMeta, lostFile string
	for _, meta := range sortedKeys(refs) {
		if rs := refs[meta]; len(rs) > 0 {
			lostMeta, lostFile = meta, rs[0]
			break
		}
	}
	if err := os.Remove(filepath.Join(store, lostFile)); err != nil {
		t.Fatal(err)
	}
	garbage := filepath.Join(store, strings.SplitN(lostMeta, "/", 2)[0], "shared", "not-referenced-by-anyone")
	if err := os.WriteFile(garbage, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-10 * 24 * time.Hour)
	os.Chtimes(garbage, old, old)
	p := mntStart(t, store, "", "--active-window", "720h")
	const fix = "--map file:/tmp/ckguard-fixtures/2.2/incremental/store="
	if !strings.Contains(p.logText(), fix) {
		t.Errorf("the mount did not warn about the unmapped references:\n%s", p.logText())
	}
	mntRun(t, "", "rm", "-rf", p.m(strings.SplitN(lostMeta, "/", 2)[0]))
	mntRun(t, "", "find", p.mnt, "-mtime", "+7", "-delete")
	if lost := lostReferences(t, store, refs); len(lost) != 1 || !strings.HasSuffix(lost[0], lostFile) {
		t.Errorf("cleanups with unmapped references lost more than the file lost before the mount (%s):\n%s", lostFile, strings.Join(lost, "\n"))
	}
	if _, err := os.Stat(garbage); err == nil {
		t.Errorf("garbage %s (a name no reference has) was refused", garbage)
	}
	var named bool
	for _, r := range p.auditRecords() {
		if r.Decision == "refuse" && r.Reason == "unmapped-references" && strings.Contains(r.Message, fix) && strings.Contains(r.Message, lostMeta) {
			named = true
		}
	}
	if !named {
		t.Errorf("no refusal names the checkpoint %s and %s", lostMeta, fix)
	}
	out, code := p.cli("why", p.m(refs[lostMeta][len(refs[lostMeta])-1]))
	if code != 1 || !strings.Contains(out, fix) {
		t.Errorf("why on a file the unmapped checkpoint may need: exit %d\n%s", code, out)
	}
	for _, cmd := range []string{"verify", "orphans"} {
		if out, code := p.cli(cmd); code != 3 || !strings.Contains(out, fix) {
			t.Errorf("%s with unmapped references: exit %d, want 3 naming %s\n%s", cmd, code, fix, out)
		}
	}
}

func sortedKeys(m map[string][]string) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
