package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/treegen"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
)

// s3Read reads key (relative to the store prefix) straight from the server; ok false when absent.
func s3Read(t *testing.T, c *s3client.Client, key string) (string, bool) {
	t.Helper()
	ctx := context.Background()
	o, err := c.Head(ctx, key)
	if err != nil {
		return "", false
	}
	b := make([]byte, o.Size)
	n, err := c.ReadAt(ctx, key, b, 0, "")
	if err != nil && !errors.Is(err, io.EOF) {
		t.Fatalf("read %s: %v", key, err)
	}
	return string(b[:n]), true
}

// TestS3QuarantineReplaceAndTruncate: on the S3 mount with --quarantine, `mv new old` over an
// unreferenced object, `: > file` and `truncate -s 0` stage the version they replace (a server-side
// copy in the area) like a deletion: `quarantine list` shows each with the kind of change, its size and
// the staged bytes equal the old object; a restore onto the key (which holds the new content) is refused;
// once the new object is moved away the restore brings back the old content byte for byte. A rename
// onto a free key stages nothing.
func TestS3QuarantineReplaceAndTruncate(t *testing.T) {
	e := s3Start(t)
	e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	files := map[string]string{
		"scratch/old": strings.Repeat("A", 70000) + "end of the replaced object", "scratch/new": "the replacement",
		"scratch/colon": "cut by an O_TRUNC open " + strings.Repeat("c", 5000),
		"scratch/zero":  "cut by truncate -s 0 " + strings.Repeat("z", 3000),
		"scratch/free":  "renamed onto a free key",
	}
	for k, v := range files {
		if _, err := c.Put(ctx, k, strings.NewReader(v), int64(len(v)), s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"),
		e.mountArgs("--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h")...)
	mntRunAll(t, "the S3 mount",
		[]string{"mv", p.m("scratch/new"), p.m("scratch/old")},
		[]string{"sh", "-c", ": > " + p.m("scratch/colon")},
		[]string{"truncate", "-s", "0", p.m("scratch/zero")},
		[]string{"mv", p.m("scratch/free"), p.m("scratch/freed")})
	for k, want := range map[string]string{"scratch/old": "the replacement", "scratch/colon": "", "scratch/zero": ""} {
		if got, _ := s3Read(t, c, k); got != want {
			t.Fatalf("%s on the server: %q, want %q", k, got, want)
		}
	}
	want := map[string]string{"scratch/old": quarantine.OpReplace, "scratch/colon": quarantine.OpTruncate, "scratch/zero": quarantine.OpTruncate}
	es := qList(t, p)
	if len(es) != len(want) {
		t.Fatalf("%d entries, want %d (one per replaced version): %+v", len(es), len(want), es)
	}
	for _, en := range es {
		op, ok := want[en.Path]
		if !ok || en.Change() != op || en.Size != int64(len(files[en.Path])) {
			t.Errorf("entry %s: change %q size %d, want %q and %d bytes", en.Path, en.Change(), en.Size, op, len(files[en.Path]))
			continue
		}
		if got, _ := s3Read(t, c, s3quarantine.Prefix+en.ID); got != files[en.Path] {
			t.Errorf("%s: the staged copy differs from the old object (%d bytes, want %d)", en.Path, len(got), len(files[en.Path]))
		}
	}
	if out, code := qcli(p, "list"); code != 0 || !strings.Contains(out, "replace") || !strings.Contains(out, "truncate") {
		t.Fatalf("quarantine list does not show the kind of change: exit %d\n%s", code, out)
	}
	if out, code := qcli(p, "restore", "scratch/old"); code != 1 {
		t.Fatalf("restore onto the replacement: exit %d, want 1 (never overwritten)\n%s", code, out)
	}
	if got, _ := s3Read(t, c, "scratch/old"); got != "the replacement" {
		t.Fatalf("the refused restore changed the replacement: %q", got)
	}
	qRestoreMovedAway(t, p, func(k string) (string, bool) { return s3Read(t, c, k) }, "scratch",
		[]string{"scratch/old", "scratch/colon", "scratch/zero"}, files)
}

// TestS3QuarantineKill9DuringReplaceAndTruncate kills the S3 mount with SIGKILL while a program renames
// objects over others and truncates objects (truncate(2) by path, O_TRUNC opens written and closed)
// through it with --quarantine, then mounts again: every old content is exactly once at its key or in
// quarantine (never lost, never counted twice: a copy made just before the kill whose change never
// happened is no entry), every replacement exactly once at its old or new key. Such a crash copy is
// listed as a problem, naming it, and is the only problem; once older than the crash-copy age (its
// record backdated here) `quarantine purge` removes it, the object at its key untouched.
func TestS3QuarantineKill9DuringReplaceAndTruncate(t *testing.T) {
	e := s3Start(t)
	e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	const n = 300
	content := func(kind string, i int) string { return fmt.Sprintf("%s-%05d-%s", kind, i, strings.Repeat(kind, 200)) }
	for i := range n {
		for k, v := range map[string]string{fmt.Sprintf("r/old-%05d", i): content("A", i), fmt.Sprintf("r/new-%05d", i): content("B", i), fmt.Sprintf("t/f-%05d", i): content("C", i)} {
			if _, err := c.Put(ctx, k, strings.NewReader(v), int64(len(v)), s3client.PutOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	args := e.mountArgs("--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h")
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), args...)
	py := `import os, sys
m, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    os.rename(f"{m}/r/new-{i:05d}", f"{m}/r/old-{i:05d}")
    if i % 2:
        with open(f"{m}/t/f-{i:05d}", "w") as f:
            f.write("x")
    else:
        os.truncate(f"{m}/t/f-{i:05d}", 0)
`
	qKillDuring(t, p, py, n, 90*time.Second)

	// check returns the crash copies listed (their ids).
	check := func(when string) []string {
		t.Helper()
		full := append([]string{"quarantine", "list", "--json", "--store", p.store, "--index", p.index}, e.mountArgs()...)
		res, code := mntRun(t, "", mntBinary(t), full...)
		var lr quarantine.ListResult
		if err := json.Unmarshal([]byte(res), &lr); err != nil || (code != 0 && len(lr.Problems) == 0) {
			t.Fatalf("%s: quarantine list: exit %d (%v)\n%s", when, code, err, res)
		}
		staged := map[string][]string{}
		for _, en := range lr.Entries {
			b, _ := s3Read(t, c, s3quarantine.Prefix+en.ID)
			staged[en.Path] = append(staged[en.Path], b)
		}
		var wants []qWant
		for i := range n {
			oldK, newK, tK := fmt.Sprintf("r/old-%05d", i), fmt.Sprintf("r/new-%05d", i), fmt.Sprintf("t/f-%05d", i)
			wants = append(wants, qWant{content("A", i), []string{oldK}}, qWant{content("B", i), []string{oldK, newK}}, qWant{content("C", i), []string{tK}})
		}
		bad := qNotOnce(t, when, func(k string) (string, bool) { return s3Read(t, c, k) }, staged, wants)
		var crashCopies []string
		for _, pr := range lr.Problems {
			if strings.HasPrefix(pr.Detail, "crash copy") {
				crashCopies = append(crashCopies, pr.ID)
			}
		}
		if bad != 0 || len(lr.Problems) != len(crashCopies) {
			t.Fatalf("%s: %d contents lost or duplicated, %d problems %+v", when, bad, len(lr.Problems), lr.Problems)
		}
		t.Logf("%s: %d entries, %d crash copies", when, len(lr.Entries), len(crashCopies))
		return crashCopies
	}
	crashCopies := check("after kill -9")
	// Seven hours later (the records backdated), a purge on the store removes the crash copies.
	for _, id := range crashCopies {
		b, ok := s3Read(t, c, s3quarantine.Prefix+id+".json")
		var en quarantine.Entry
		if err := json.Unmarshal([]byte(b), &en); !ok || err != nil {
			t.Fatalf("record of crash copy %s: %v %v", id, ok, err)
		}
		en.DeletedAt = en.DeletedAt.Add(-7 * time.Hour)
		nb, _ := json.Marshal(en)
		if _, err := c.Put(ctx, s3quarantine.Prefix+id+".json", bytes.NewReader(nb), int64(len(nb)), s3client.PutOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	purge := append([]string{"quarantine", "purge", "--store", p.store, "--index", p.index, "--ttl", "24h"}, e.mountArgs()...)
	out2, _ := mntRun(t, "", mntBinary(t), purge...)
	for _, id := range crashCopies {
		if _, ok := s3Read(t, c, s3quarantine.Prefix+id); ok {
			t.Fatalf("crash copy %s is still there after the purge\n%s", id, out2)
		}
	}
	if left := check("after the purge"); len(left) != 0 {
		t.Fatalf("crash copies left after the purge: %v", left)
	}
	waitStale(t, p)
	p.start(args...)
	if left := check("after the remount"); len(left) != 0 {
		t.Fatalf("crash copies after the remount: %v", left)
	}
}

// s3Backdate moves the deletion time of the entry record id back by d (as if staged d ago).
func s3Backdate(t *testing.T, c *s3client.Client, id string, d time.Duration) {
	t.Helper()
	b, ok := s3Read(t, c, s3quarantine.Prefix+id+".json")
	var en quarantine.Entry
	if err := json.Unmarshal([]byte(b), &en); !ok || err != nil {
		t.Fatalf("record of %s: %v %v", id, ok, err)
	}
	en.DeletedAt = en.DeletedAt.Add(-d)
	nb, _ := json.Marshal(en)
	if _, err := c.Put(context.Background(), s3quarantine.Prefix+id+".json", bytes.NewReader(nb), int64(len(nb)), s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
}

// TestS3QuarantineCrashCopies: the two states a crashed change in place leaves (injected: the area's own
// Keep, as the dead mount ran it, then no change, or the change without the Applied mark), then a mount
// over the bucket: `quarantine list` through it shows the copy whose change never happened as a crash
// copy problem (exit 1) and the other as an entry; a purge marks the entry applied at once and keeps
// the young crash copy; once the crash copy is seven hours old a purge removes it, the object at its
// key untouched, and the list is clean.
func TestS3QuarantineCrashCopies(t *testing.T) {
	e := s3Start(t)
	e.tree(t, incident{"IncidentOne", treegen.IncidentOne}, s3Root)
	c := e.client(t, e.srv.Endpoint)
	ctx := context.Background()
	dead := s3quarantine.New(c, nil, false)
	kept := map[string]quarantine.Entry{}
	for k, v := range map[string]string{"scratch/not-done": "a truncation that never happened", "scratch/done": "replaced before the crash"} {
		etag, err := c.Put(ctx, k, strings.NewReader(v), int64(len(v)), s3client.PutOptions{})
		if err != nil {
			t.Fatal(err)
		}
		en, err := dead.Keep(ctx, k, s3client.Object{Key: k, Size: int64(len(v)), ETag: etag}, quarantine.Decision{Op: quarantine.OpTruncate, Reason: "allowed"})
		if err != nil {
			t.Fatal(err)
		}
		kept[k] = en
	}
	if _, err := c.Put(ctx, "scratch/done", strings.NewReader("x"), 1, s3client.PutOptions{}); err != nil {
		t.Fatal(err)
	}
	args := e.mountArgs("--grace", "0s", "--active-window", "0s", "--savepoint-keep-newest=false", "--quarantine", "24h")
	p := mntStart(t, s3Root, filepath.Join(t.TempDir(), "index"), args...)
	list := func() (quarantine.ListResult, int) {
		t.Helper()
		out, code := qcli(p, "list", append([]string{"--json"}, e.mountArgs()...)...)
		var lr quarantine.ListResult
		if err := json.Unmarshal([]byte(out), &lr); err != nil {
			t.Fatalf("quarantine list --json: exit %d: %v\n%s", code, err, out)
		}
		return lr, code
	}
	lr, _ := list()
	if len(lr.Problems) != 1 || lr.Problems[0].ID != kept["scratch/not-done"].ID || !strings.HasPrefix(lr.Problems[0].Detail, "crash copy") ||
		len(lr.Entries) != 1 || lr.Entries[0].ID != kept["scratch/done"].ID {
		t.Fatalf("list: %+v, want the crash copy of scratch/not-done as a problem and scratch/done as an entry", lr)
	}
	out, code := qcli(p, "list", e.mountArgs()...)
	if code != 1 || !strings.Contains(out, "crash copy") || !strings.Contains(out, "scratch/not-done") {
		t.Fatalf("quarantine list: exit %d, want 1 naming the crash copy:\n%s", code, out)
	}
	purge := func() {
		t.Helper()
		if out, code := qcli(p, "purge", e.mountArgs()...); code != 0 && code != 1 {
			t.Fatalf("quarantine purge: exit %d\n%s", code, out)
		}
	}
	purge()
	if lr, _ := list(); len(lr.Entries) != 1 || !lr.Entries[0].Applied || len(lr.Problems) != 1 {
		t.Fatalf("after a purge: %+v, want the entry marked applied and the young crash copy kept", lr)
	}
	s3Backdate(t, c, kept["scratch/not-done"].ID, 7*time.Hour)
	purge()
	if lr, _ := list(); len(lr.Problems) != 0 || len(lr.Entries) != 1 {
		t.Fatalf("after a purge seven hours on: %+v, want the entry alone", lr)
	}
	if out, code := qcli(p, "list", e.mountArgs()...); code != 0 {
		t.Fatalf("quarantine list after the crash copy went: exit %d\n%s", code, out)
	}
	if _, ok := s3Read(t, c, s3quarantine.Prefix+kept["scratch/not-done"].ID); ok {
		t.Fatal("the crash copy is still in the area")
	}
	if got, ok := s3Read(t, c, "scratch/not-done"); !ok || got != "a truncation that never happened" {
		t.Fatalf("scratch/not-done after the purge: %q %v", got, ok)
	}
}
