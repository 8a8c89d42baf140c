package main

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex/treegen"
)

// cliStore is a store with two job folders (the incident: the new job references the old one's SSTs)
// and a savepoint folder, and its index.
type cliStore struct {
	tree       *treegen.Tree
	store, idx string
	savepoint  string // the savepoint's folder (store key)
}

func newCLIStore(t *testing.T) *cliStore {
	t.Helper()
	dir := t.TempDir()
	tr, err := treegen.IncidentOne(filepath.Join(dir, "store"), time.Now())
	if err != nil {
		t.Fatal(err)
	}
	sp := "flink-savepoints/savepoint-af8b2e-5e8c1f0a9b3d"
	ct := time.Now().Add(-48 * time.Hour)
	c, err := tr.Checkpoint(treegen.Spec{Dir: sp, ID: 90, Savepoint: true, Completed: ct, Private: []string{"a", "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Data(c, ct.Add(-time.Minute)); err != nil {
		t.Fatal(err)
	}
	return &cliStore{tree: tr, store: tr.Root, idx: filepath.Join(dir, "index"), savepoint: sp}
}

// cliResult is one run of the real binary.
type cliResult struct {
	stdout, stderr string
	code           int
}

func runBinary(t *testing.T, args ...string) cliResult {
	t.Helper()
	bin := builtBinary(t) // built before the command's 2 minutes start: a build on a loaded machine takes longer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.Env = append(os.Environ(), "CKGUARD_STORE=", "CKGUARD_INDEX=")
	err := cmd.Run()
	r := cliResult{stdout: out.String(), stderr: errb.String()}
	if ee, ok := err.(*exec.ExitError); ok {
		r.code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return r
}

var snakeKey = regexp.MustCompile(`^[a-z0-9]+(_[a-z0-9]+)*$`)

// jsonKeys returns every object key in v (recursively) that is not snake_case, except those allowed
// (map keys such as handle type names, and keys kept for one release).
func nonSnakeKeys(v any, allowed map[string]bool, skipUnder map[string]bool) []string {
	var bad []string
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if !snakeKey.MatchString(k) && !allowed[k] {
				bad = append(bad, k)
			}
			if !skipUnder[k] {
				bad = append(bad, nonSnakeKeys(e, allowed, skipUnder)...)
			}
		}
	case []any:
		for _, e := range x {
			bad = append(bad, nonSnakeKeys(e, allowed, skipUnder)...)
		}
	}
	return bad
}

// timesHaveZones checks every value of a key named like a time parses as RFC 3339 (with its zone).
func timesHaveZones(t *testing.T, what string, v any) {
	t.Helper()
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && (k == "completed" || k == "mtime" || k == "last_sync" || k == "since") {
				if _, err := time.Parse(time.RFC3339Nano, s); err != nil {
					t.Errorf("%s: %s = %q is not RFC 3339 with a zone: %v", what, k, s, err)
				}
			}
			timesHaveZones(t, what, e)
		}
	case []any:
		for _, e := range x {
			timesHaveZones(t, what, e)
		}
	}
}

// TestCLI is the contract an operator relies on, on the real binary: flags after positional
// arguments, durations with days, the exit-code table of the README, one JSON style, and messages
// that say what to do in one line.
func TestCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	s := newCLIStore(t)
	loc := []string{"--store", s.store, "--index", s.idx}
	referenced := s.tree.Referenced()[0]
	newJobCk := "flink-checkpoints/" + treegen.IncidentOneNewJob + "/chk-100274"
	with := func(pre []string, args ...string) []string { return append(append([]string{}, pre...), args...) }
	type check func(t *testing.T, r cliResult)
	contains := func(where string, subs ...string) check {
		return func(t *testing.T, r cliResult) {
			text := r.stdout
			if where == "stderr" {
				text = r.stderr
			}
			for _, sub := range subs {
				if !strings.Contains(text, sub) {
					t.Errorf("%s lacks %q:\n%s", where, sub, text)
				}
			}
		}
	}
	lacks := func(where string, subs ...string) check {
		return func(t *testing.T, r cliResult) {
			text := r.stdout
			if where == "stderr" {
				text = r.stderr
			}
			for _, sub := range subs {
				if strings.Contains(text, sub) {
					t.Errorf("%s has %q:\n%s", where, sub, text)
				}
			}
		}
	}
	oneLineError := func(subs ...string) check {
		return func(t *testing.T, r cliResult) {
			if n := strings.Count(strings.TrimSpace(r.stderr), "\n"); n != 0 || strings.TrimSpace(r.stdout) != "" {
				t.Errorf("want one line on stderr and nothing on stdout, got %d lines:\n%s\nstdout:\n%s", n+1, r.stderr, r.stdout)
			}
			contains("stderr", subs...)(t, r)
		}
	}
	jsonDoc := func(fn func(t *testing.T, doc map[string]any)) check {
		return func(t *testing.T, r cliResult) {
			var doc map[string]any
			if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
				t.Fatalf("not JSON: %v\n%s", err, r.stdout)
			}
			if bad := nonSnakeKeys(doc, nil, map[string]bool{"handle_counts": true, "handleCounts": true}); len(bad) > 0 {
				// inspect alone keeps its earlier camelCase keys for one release.
				for _, k := range bad {
					if !map[string]bool{"formatVersion": true, "checkpointId": true, "savepointFormat": true, "handleCounts": true, "inlineBytes": true, "goVersion": true}[k] {
						t.Errorf("JSON key %q is not snake_case", k)
					}
				}
			}
			timesHaveZones(t, "JSON", doc)
			if fn != nil {
				fn(t, doc)
			}
		}
	}
	field := func(key string, want any) func(t *testing.T, doc map[string]any) {
		return func(t *testing.T, doc map[string]any) {
			var v any = doc
			for _, k := range strings.Split(key, ".") {
				m, _ := v.(map[string]any)
				v = m[k]
			}
			if v != want {
				t.Errorf("JSON %s = %#v, want %#v", key, v, want)
			}
		}
	}
	// The index is built once, so the order of the cases does not matter.
	if r := runBinary(t, with([]string{"index", "rebuild"}, loc...)...); r.code != 0 {
		t.Fatalf("index rebuild: %+v", r)
	}
	for _, tc := range []struct {
		name   string
		args   []string
		want   int
		checks []check
	}{
		// Argument orders: flags after the positional argument work as before it.
		{"why: flags after PATH", []string{"why", referenced, "--store", s.store, "--index", s.idx, "--json"}, 1,
			[]check{jsonDoc(field("allow", false))}},
		{"why: --json after PATH", with(with([]string{"why"}, loc...), referenced, "--json"), 1, []check{jsonDoc(field("reason", "referenced"))}},
		{"why: -- keeps a dash-led PATH positional", with(with([]string{"why"}, loc...), "--", "-odd"), 0, []check{contains("stdout", "ALLOWED")}},
		{"pin: --json after PATH", with(with([]string{"pin"}, loc...), newJobCk, "--json"), 0, []check{jsonDoc(field("pinned", true))}},
		{"pin again: idempotent", with(with([]string{"pin"}, loc...), newJobCk), 0, []check{contains("stdout", "pinned ")}},
		{"unpin", with(with([]string{"unpin"}, loc...), newJobCk), 0, nil},
		{"unpin of an unpinned checkpoint: idempotent", with(with([]string{"unpin"}, loc...), newJobCk, "--json"), 0, []check{jsonDoc(field("pinned", false))}},
		{"umount: --lazy after MOUNTPOINT, not mounted", []string{"umount", t.TempDir(), "--lazy"}, 2,
			[]check{oneLineError("is not mounted"), lacks("stderr", "usage")}},

		// Durations: Go's syntax plus days and weeks, everywhere; nonsense and negatives rejected in
		// one line naming the syntax.
		{"orphans --older-than 7d", with(with([]string{"orphans"}, loc...), "--older-than", "7d", "--json"), 0, []check{jsonDoc(field("older_than", "7d"))}},
		{"orphans --older-than 2w --grace 1d12h", with(with([]string{"orphans"}, loc...), "--older-than", "2w", "--grace", "1d12h", "--json"), 0, []check{jsonDoc(field("older_than", "14d"))}},
		{"orphans --older-than=336h", with(with([]string{"orphans"}, loc...), "--older-than=336h", "--json"), 0, []check{jsonDoc(field("older_than", "14d"))}},
		{"orphans --grace 7x", with(with([]string{"orphans"}, loc...), "--grace", "7x"), 2, []check{oneLineError("--grace", "7x", "7d, 2w", "ckguard orphans --help")}},
		{"orphans --older-than -5m", with(with([]string{"orphans"}, loc...), "--older-than", "-5m"), 2, []check{oneLineError("negative", "-5m")}},
		{"orphans --older-than 7 (no unit)", with(with([]string{"orphans"}, loc...), "--older-than", "7"), 2, []check{oneLineError("7d")}},
		{"stats --max-staleness 2w", with(with([]string{"stats"}, loc...), "--max-staleness", "2w", "--json"), 0, []check{jsonDoc(field("policy.max_staleness", "14d"))}},
		{"umount --timeout 1d", []string{"umount", "--timeout", "1d", t.TempDir()}, 2, []check{oneLineError("is not mounted")}},
		{"mount: --max-staleness under two --sync-intervals", with(with([]string{"mount"}, loc...), "--sync-interval", "1m", "--max-staleness", "1m", t.TempDir()), 2,
			[]check{oneLineError("--max-staleness 1m", "--sync-interval 1m", "--max-staleness 4m")}},
		{"mount: --sync-interval 0s", with(with([]string{"mount"}, loc...), "--sync-interval", "0s", t.TempDir()), 2, []check{oneLineError("--sync-interval 0s")}},

		// Exit codes (README table): 0 ok, 1 a problem found, 2 usage or operational error.
		{"no arguments", nil, 2, []check{contains("stdout", "COMMANDS:")}},
		{"why without --store", []string{"why", referenced}, 2, []check{oneLineError("--store is required"), lacks("stderr", "no command")}},
		{"why without PATH", with([]string{"why"}, loc...), 2, []check{oneLineError("want exactly one PATH")}},
		{"why refused", with(with([]string{"why"}, loc...), referenced), 1, []check{contains("stdout", "REFUSED", "referenced by ")}},
		{"why allowed", with(with([]string{"why"}, loc...), "flink-checkpoints/nothing-here"), 0, nil},
		{"why of a savepoint's file: savepoint advice", with(with([]string{"why"}, loc...), s.savepoint+"/a"), 1,
			[]check{contains("stdout", "dispose of the savepoint"), lacks("stdout", "flink checkpoint <job-id> -full")}},
		{"why of a URI outside the store", with(with([]string{"why"}, loc...), "s3://other-bucket/x"), 2,
			[]check{contains("stderr", "not in the guarded store"), lacks("stdout", "reason: allowed")}},
		{"why --json of a URI outside the store", with(with([]string{"why"}, loc...), "s3://other-bucket/x", "--json"), 2,
			[]check{jsonDoc(field("reason", "outside-store")), jsonDoc(field("allow", false)), jsonDoc(field("outside", true))}},
		{"verify green", with([]string{"verify"}, loc...), 0, []check{contains("stdout", "verify OK")}},
		{"unknown flag", with(with([]string{"verify"}, loc...), "--no-such-flag"), 2, []check{oneLineError("no-such-flag", "ckguard verify --help")}},
		{"unknown command", []string{"no-such-command"}, 2, nil},
		{"index without a subcommand", []string{"index"}, 2, []check{contains("stdout", "rebuild")}},
		{"index with an unknown subcommand", []string{"index", "bogus"}, 2, []check{oneLineError(`no subcommand "bogus"`)}},
		{"index rebuild --no-sync: not a flag there", with([]string{"index", "rebuild", "--no-sync"}, loc...), 2, []check{oneLineError("no-sync")}},

		// JSON: snake_case keys, RFC 3339 times with zone, durations as the flags write them.
		{"stats --json", with(with([]string{"stats"}, loc...), "--json"), 0, []check{jsonDoc(func(t *testing.T, doc map[string]any) {
			field("policy.grace", "1h")(t, doc)
			field("policy.active_window", "7d")(t, doc)
			field("jobs", 2.0)(t, doc)
			field("savepoint_folders", 1.0)(t, doc)
			if n, _ := doc["index_bytes"].(float64); n <= 0 || n > 64<<20 {
				t.Errorf("index_bytes %v: want the few KiB the index takes on disk", doc["index_bytes"])
			}
		})}},
		{"checkpoints --json", with(with([]string{"checkpoints"}, loc...), "--json"), 0, []check{jsonDoc(func(t *testing.T, doc map[string]any) {
			jobs, _ := doc["jobs"].([]any)
			for _, j := range jobs {
				if n, _ := j.(map[string]any)["referenced_bytes"].(float64); n <= 0 {
					t.Errorf("job %v: referenced_bytes %v, want the size of its files", j.(map[string]any)["job"], n)
				}
			}
		})}},
		{"orphans --json", with(with([]string{"orphans"}, loc...), "--json"), 0, []check{jsonDoc(field("older_than", "0s"))}},
		{"verify --json", with(with([]string{"verify"}, loc...), "--json"), 0, []check{jsonDoc(field("ok", true))}},
		{"verify --read-rate nonsense", with(with([]string{"verify"}, loc...), "--read", "--read-rate", "fast"), 2, []check{oneLineError("--read-rate", "50MiB", "ckguard verify --help")}},
		{"latest without --job", with([]string{"latest"}, loc...), 2, []check{oneLineError("--job is required", "ckguard latest --help")}},
		{"inspect --json", []string{"inspect", "--json", filepath.Join(s.store, newJobCk, "_metadata")}, 0, []check{jsonDoc(func(t *testing.T, doc map[string]any) {
			field("checkpoint_id", 100274.0)(t, doc)
			field("checkpointId", 100274.0)(t, doc) // kept for one release
		})}},
		{"version --json", []string{"version", "--json"}, 0, []check{jsonDoc(func(t *testing.T, doc map[string]any) {
			if doc["go_version"] == nil || doc["go_version"] != doc["goVersion"] {
				t.Errorf("go_version %v, goVersion (kept for one release) %v", doc["go_version"], doc["goVersion"])
			}
		})}},

		// Text: counts and times an operator reads.
		{"stats text", with([]string{"stats"}, loc...), 0, []check{contains("stdout", "job folders ", "savepoint folders ", "on disk", "Z ("), lacks("stdout", "1 jobs")}},
		{"checkpoints text", with([]string{"checkpoints"}, loc...), 0, []check{
			contains("stdout", "savepoint folder flink-savepoints: 0 checkpoints, 1 savepoint,", "2 checkpoints", "REFERENCED", "e3d8c0a9"),
			lacks("stdout", "1 savepoints", "1 checkpoints"),
			func(t *testing.T, r cliResult) {
				for _, l := range strings.Split(r.stdout, "\n") {
					if !strings.HasPrefix(l, "  ") {
						continue // the heading names the referenced folders in full
					}
					if len(l) > 110 {
						t.Errorf("table row of %d columns: %q", len(l), l)
					}
				}
			}}},
		{"inspect of an unparseable file", []string{"inspect", filepath.Join(s.store, "flink-checkpoints")}, 1, []check{oneLineError("is a directory")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := runBinary(t, tc.args...)
			if r.code != tc.want {
				t.Errorf("ckguard %v: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", tc.args, r.code, tc.want, r.stdout, r.stderr)
			}
			for _, c := range tc.checks {
				c(t, r)
			}
		})
	}
}

// TestCommandFlagSets: a command lists only the flags that act there.
func TestCommandFlagSets(t *testing.T) {
	app := newApp()
	flagsOf := map[string]map[string]bool{}
	walkCommands(app.Commands, "", func(path string, c *cli.Command) {
		m := map[string]bool{}
		for _, f := range c.Flags {
			m[f.Names()[0]] = true
		}
		flagsOf[path] = m
	})
	for _, tc := range []struct {
		cmd       string
		has, lack []string
	}{
		{"mount", []string{"store", "index", "grace", "sync-interval", "control-socket"}, []string{"json", "no-sync"}},
		{"index rebuild", []string{"store", "index", "json"}, []string{"control-socket", "no-sync", "grace"}},
		{"index sync", []string{"store", "index", "json"}, []string{"control-socket", "no-sync"}},
		{"why", []string{"store", "json", "control-socket", "no-sync", "grace"}, nil},
		{"umount", []string{"lazy", "timeout"}, []string{"store", "json"}},
	} {
		for _, f := range tc.has {
			if !flagsOf[tc.cmd][f] {
				t.Errorf("ckguard %s has no --%s", tc.cmd, f)
			}
		}
		for _, f := range tc.lack {
			if flagsOf[tc.cmd][f] {
				t.Errorf("ckguard %s lists --%s, which does nothing there", tc.cmd, f)
			}
		}
	}
}

// TestInterspersed: flags typed after positional arguments are moved in front of them, values and
// order kept; after -- everything is positional.
func TestInterspersed(t *testing.T) {
	app := newApp()
	for _, tc := range []struct{ in, want string }{
		{"ckguard why P --json --store S", "ckguard why --json --store S P"},
		{"ckguard why --store S P --grace 7d", "ckguard why --store S --grace 7d P"},
		{"ckguard why P --older-than=-5m", "ckguard why --older-than=-5m P"},
		{"ckguard umount /m --lazy", "ckguard umount --lazy /m"},
		{"ckguard index sync --store S --json", "ckguard index sync --store S --json"},
		{"ckguard why --store S -- -P --json", "ckguard why --store S -- -P --json"},
		{"ckguard why --store S -- P", "ckguard why --store S P"},
		{"ckguard inspect - --json", "ckguard inspect --json -"},
		{"ckguard nosuch P --x", "ckguard nosuch P --x"},
		{"ckguard --help", "ckguard --help"},
	} {
		got := strings.Join(interspersed(app, strings.Fields(tc.in)), " ")
		if got != tc.want {
			t.Errorf("%s: got %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestStillWorking: a long command says, at every tick, that it is still at work and for how long;
// after stop it says nothing more.
func TestStillWorking(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ticks := make(chan time.Time)
	stop := stillWorking(log, "ckguard orphans", "the running mount", func() time.Time { return t0 }, ticks)
	ticks <- t0.Add(20 * time.Second)
	ticks <- t0.Add(95 * time.Second)
	stop()
	stop() // idempotent
	out := buf.String()
	for _, want := range []string{"ckguard orphans: still working", "elapsed=20s", "elapsed=1m35s", `via="the running mount"`} {
		if !strings.Contains(out, want) {
			t.Errorf("progress lacks %q:\n%s", want, out)
		}
	}
	if n := strings.Count(out, "\n"); n != 2 {
		t.Errorf("%d lines, want 2:\n%s", n, out)
	}
}
