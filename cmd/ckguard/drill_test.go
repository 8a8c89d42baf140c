package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// drillFixture copies the real Flink store testdata/flink/2.2/incremental/store to a temp dir, gives
// every referenced file the size its handle declares (the fixtures keep empty placeholders; sparse),
// and dates each chk-N/_metadata N minutes after a base so that the newest is the highest id. It
// returns the store root, the map prefix, and per job folder its checkpoints' references (store keys).
func drillFixture(t *testing.T) (root, prefix string, refs map[string]map[int]map[string]int64) {
	t.Helper()
	src := filepath.Join("..", "..", "testdata", "flink", "2.2", "incremental", "store")
	root = filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	prefix = "file:/tmp/ckguard-fixtures/2.2/incremental/store"
	refs = map[string]map[int]map[string]int64{}
	chk := regexp.MustCompile(`^([^/]+)/chk-(\d+)/_metadata$`)
	base := time.Now().Add(-time.Hour)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "_metadata" {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m, err := flinkmeta.ParseBytes(b, p, flinkmeta.Options{})
		if err != nil {
			return err
		}
		mine := map[string]int64{}
		for _, r := range m.References(p) {
			key, ok := strings.CutPrefix(r.Resolved, prefix+"/")
			if !ok {
				key, _ = filepath.Rel(root, r.Resolved)
			}
			if r.StateSize > mine[key] {
				mine[key] = r.StateSize
			}
			local := filepath.Join(root, key)
			if fi, err := os.Stat(local); err == nil && fi.Size() < r.StateSize {
				if err := os.Truncate(local, r.StateSize); err != nil {
					return err
				}
			}
		}
		if sm := chk.FindStringSubmatch(filepath.ToSlash(rel)); sm != nil {
			n, _ := strconv.Atoi(sm[2])
			if refs[sm[1]] == nil {
				refs[sm[1]] = map[int]map[string]int64{}
			}
			refs[sm[1]][n] = mine
			at := base.Add(time.Duration(n) * time.Minute)
			if err := os.Chtimes(p, at, at); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, prefix, refs
}

// TestDrillCLI: a truncated SST that only the newest checkpoint of a job references keeps verify
// green, turns verify --deep red naming the file and its expected size, and makes latest skip that
// checkpoint for the one before it.
func TestDrillCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	root, prefix, refs := drillFixture(t)
	// A job with two live checkpoints, and a file the newer references and the older does not.
	var job, victim string
	var newest, older int
	var size int64
	for j, cks := range refs {
		var ids []int
		for id := range cks {
			ids = append(ids, id)
		}
		if len(ids) < 2 {
			continue
		}
		sort.Ints(ids)
		newest, older = ids[len(ids)-1], ids[len(ids)-2]
		for k, s := range cks[newest] {
			if _, shared := cks[older][k]; !shared && s > 1 {
				job, victim, size = j, k, s
				break
			}
		}
		if victim != "" {
			break
		}
	}
	if victim == "" {
		t.Fatal("no job with two checkpoints where the newer has a file of its own")
	}
	idx := t.TempDir()
	loc := []string{"--store", root, "--index", idx, "--map", prefix + "="}
	args := func(a ...string) []string { return append(append([]string{}, a...), loc...) }

	// Intact: the drill and latest agree with verify.
	if r := runBinary(t, args("verify", "--deep")...); r.code != 0 {
		t.Fatalf("verify --deep of the intact store: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := runBinary(t, args("latest", "--job", job)...); r.code != 0 || r.stdout != fmt.Sprintf("%s/%s/chk-%d\n", root, job, newest) {
		t.Fatalf("latest of the intact store: exit %d %q %s", r.code, r.stdout, r.stderr)
	}
	if err := os.Truncate(filepath.Join(root, victim), size-1); err != nil {
		t.Fatal(err)
	}
	newestMeta := fmt.Sprintf("%s/chk-%d/_metadata", job, newest)
	jsonOf := func(t *testing.T, s string) map[string]any {
		var doc map[string]any
		if err := json.Unmarshal([]byte(s), &doc); err != nil {
			t.Fatalf("not JSON: %v\n%s", err, s)
		}
		if bad := nonSnakeKeys(doc, nil, nil); len(bad) > 0 {
			t.Errorf("JSON keys not snake_case: %v", bad)
		}
		return doc
	}
	for _, tc := range []struct {
		name  string
		args  []string
		want  int
		check func(t *testing.T, r cliResult)
	}{
		{"verify: existence only, green", args("verify"), 0, nil},
		{"verify --deep: red, names the file and the expected size", args("verify", "--deep"), 1, func(t *testing.T, r cliResult) {
			for _, s := range []string{"BROKEN " + newestMeta, fmt.Sprintf("short %s: %d bytes, its handles need at least %d", victim, size-1, size), "verify FAILED"} {
				if !strings.Contains(r.stdout, s) {
					t.Errorf("stdout lacks %q:\n%s", s, r.stdout)
				}
			}
		}},
		{"verify --deep --json", args("verify", "--deep", "--json"), 1, func(t *testing.T, r cliResult) {
			doc := jsonOf(t, r.stdout)
			broken, _ := doc["broken"].([]any)
			if doc["deep"] != true || doc["ok"] != false || len(broken) != 1 {
				t.Fatalf("deep=%v ok=%v broken=%v", doc["deep"], doc["ok"], doc["broken"])
			}
			b := broken[0].(map[string]any)
			short := b["short"].([]any)[0].(map[string]any)
			if b["metadata"] != newestMeta || short["path"] != victim || short["size"] != float64(size-1) || short["expected_size"] != float64(size) {
				t.Errorf("broken = %v", b)
			}
			if cks, _ := doc["checkpoints"].([]any); len(cks) != int(doc["checked"].(float64)) {
				t.Errorf("checkpoints lists %d of %v", len(cks), doc["checked"])
			}
		}},
		{"verify --read: every byte, MB/s", args("verify", "--read", "--read-rate", "0", "--json"), 1, func(t *testing.T, r cliResult) {
			doc := jsonOf(t, r.stdout)
			if doc["read"] != true || doc["bytes_read"].(float64) <= 0 {
				t.Errorf("read=%v bytes_read=%v", doc["read"], doc["bytes_read"])
			}
			if _, ok := doc["mb_per_second"].(float64); !ok {
				t.Errorf("no mb_per_second: %v", doc)
			}
		}},
		{"verify --read text", args("verify", "--read", "--read-rate", "1GiB"), 1, func(t *testing.T, r cliResult) {
			if !strings.Contains(r.stdout, "MB/s") {
				t.Errorf("no MB/s line:\n%s", r.stdout)
			}
		}},
		{"latest skips the broken newest", args("latest", "--job", job), 0, func(t *testing.T, r cliResult) {
			if want := fmt.Sprintf("%s/%s/chk-%d\n", root, job, older); r.stdout != want {
				t.Errorf("stdout %q, want %q", r.stdout, want)
			}
			if !strings.Contains(r.stderr, "skipped "+newestMeta) || !strings.Contains(r.stderr, victim) {
				t.Errorf("stderr does not name the skipped checkpoint and file:\n%s", r.stderr)
			}
		}},
		{"latest by job folder path, --json", args("latest", "--job", filepath.Join(root, job), "--json"), 0, func(t *testing.T, r cliResult) {
			doc := jsonOf(t, r.stdout)
			skipped, _ := doc["skipped"].([]any)
			ck, _ := doc["checkpoint"].(map[string]any)
			if doc["path"] != fmt.Sprintf("%s/%s/chk-%d", root, job, older) || len(skipped) != 1 || ck["id"] != float64(older) || ck["ok"] != true {
				t.Errorf("latest --json = %s", r.stdout)
			}
		}},
		{"latest of an unknown job", args("latest", "--job", "no-such-job"), 1, func(t *testing.T, r cliResult) {
			if !strings.Contains(r.stderr, "no live checkpoint") {
				t.Errorf("stderr: %s", r.stderr)
			}
		}},
		{"latest without --job", args("latest"), 2, nil},
		{"verify --read-rate nonsense", args("verify", "--read", "--read-rate", "fast"), 2, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, tc.args...)
			if r.code != tc.want {
				t.Fatalf("exit %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, tc.want, r.stdout, r.stderr)
			}
			if tc.check != nil {
				tc.check(t, r)
			}
		})
	}

	// An index held by a running mount (its lock): one line saying how to drill anyway.
	lock, err := os.OpenFile(filepath.Join(idx, "LOCK"), os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, args("verify", "--deep", "--no-sync", "--control-socket", "")...)
	if r.code != 2 || !strings.Contains(r.stderr, "give --index a scratch directory") {
		t.Errorf("verify --deep on a held index: exit %d\n%s", r.code, r.stderr)
	}
}
