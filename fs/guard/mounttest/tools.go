package mounttest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// metadataIndexedAtClose: a _metadata written through the mount is indexed before its close returns,
// from its complete content, so what it references is protected the moment the writer learns it is
// stored; one truncated by path is indexed again before truncate returns; a temporary file renamed
// into place is reported as a rename.
func metadataIndexedAtClose(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	if err := os.MkdirAll(e.path("job/chk-5"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Set from the FUSE server's goroutine; the kernel orders it before close returns, which the race
	// detector cannot see, hence the atomic.
	var saw atomic.Value
	saw.Store("")
	e.ck.SetWrittenHook(func(key string) error {
		if key != "job/chk-5/_metadata" && key != "job/chk-6/_metadata" {
			return nil
		}
		b, _ := e.st.Get(t, key)
		saw.Store(b)
		e.ck.Protect("job/chk-5/state", key)
		return nil
	})
	if err := os.WriteFile(e.path("job/chk-5/state"), []byte("s"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.path("job/chk-5/_metadata"), []byte("meta-bytes"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := saw.Load().(string); got != "meta-bytes" {
		t.Fatalf("the index read %q at close, want the complete _metadata", got)
	}
	want(t, "unlink of what the _metadata references, right after its close", os.Remove(e.path("job/chk-5/state")), e.refuse)
	// Rewritten in place (open O_TRUNC, write, close): indexed again, from the new content.
	if err := os.WriteFile(e.path("job/chk-5/_metadata"), []byte("meta-bytes-2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := saw.Load().(string); got != "meta-bytes-2" {
		t.Errorf("the index read %q at the close of the rewritten _metadata, want its new content", got)
	}
	// Truncated by path (one no writer of the mount has open): indexed again before truncate returns,
	// from what is left.
	e.st.Put(t, "job/chk-6/_metadata", "meta-bytes-6")
	want(t, "truncate of the _metadata", os.Truncate(e.path("job/chk-6/_metadata"), 0), 0)
	if got := saw.Load().(string); got != "" {
		t.Errorf("the index read %q after truncate(2) of the _metadata returned, want it empty", got)
	}
	// Flink's recoverable writer: a temporary file renamed into place.
	if err := os.WriteFile(e.path("job/chk-5/.tmp"), []byte("m2"), 0o644); err != nil {
		t.Fatal(err)
	}
	want(t, "rename of the temporary file", os.Rename(e.path("job/chk-5/.tmp"), e.path("job/chk-5/chk-6-meta")), 0)
	e.told(t, "written job/chk-5/_metadata")
	e.told(t, "renamed job/chk-5/.tmp job/chk-5/chk-6-meta")
	calls := e.ck.CallLog()
	if h.NotifiesEveryWrite {
		e.told(t, "written job/chk-5/state")
		return
	}
	for _, c := range calls {
		if strings.HasPrefix(c, "written ") && !strings.HasSuffix(c, "/_metadata") {
			t.Errorf("the index was told of a write that is no _metadata: %s", c)
		}
	}
}

// metadataCommitRename: Flink's commit of a checkpoint, the rename of chk-N/._metadata.inprogress.<id>
// onto chk-N/_metadata, is allowed although its young source is in grace (audited as metadata-commit);
// any other rename of a young file onto _metadata is still refused for grace.
func metadataCommitRename(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	const tmp, state, meta = "job/chk-7/._metadata.inprogress.0f3a", "job/chk-7/state", "job/chk-7/_metadata"
	e.st.Put(t, tmp, "meta")
	e.st.Put(t, state, "s")
	e.ck.Young(tmp)
	e.ck.Young(state)
	want(t, "rename of a young state file onto _metadata", os.Rename(e.path(state), e.path(meta)), e.refuse)
	want(t, "the commit rename", os.Rename(e.path(tmp), e.path(meta)), 0)
	e.intact(t, "after the commit", meta, "meta")
	e.intact(t, "after the refused rename", state, "s")
	e.gone(t, "after the commit", tmp)
	e.told(t, "renamed "+tmp+" "+meta)
	recs := e.records(t)
	if !slices.ContainsFunc(recs, func(r audit.Record) bool {
		return r.Decision == "allow" && r.Reason == "metadata-commit" && r.Path == tmp && r.To == meta
	}) {
		t.Errorf("no metadata-commit allow of %s in the audit log: %+v", tmp, recs)
	}
	if !slices.ContainsFunc(recs, func(r audit.Record) bool {
		return r.Decision == "refuse" && r.Reason == string(verdict.ReasonGrace) && r.Path == state
	}) {
		t.Errorf("no grace refusal of %s in the audit log: %+v", state, recs)
	}
}

// cleanupToolsLeaveReferenced: GNU rm -rf, find -delete and Python's shutil.rmtree through the mount
// remove everything unreferenced (empty folders and checkpoint folders included) and leave exactly the
// referenced files; rm and find say why they could not remove the rest.
func cleanupToolsLeaveReferenced(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	tools := []struct {
		name string
		argv func(dir string) []string
		says bool // reports the refusals on stderr
	}{
		{"rm -rf", func(dir string) []string { return []string{"rm", "-rf", dir} }, true},
		{"find -delete", func(dir string) []string { return []string{"find", dir, "-delete"} }, true},
		{"shutil.rmtree", func(dir string) []string {
			return []string{"/usr/bin/python3", "-c", "import shutil, sys; shutil.rmtree(sys.argv[1], ignore_errors=True)", dir}
		}, false},
	}
	for i, tool := range tools {
		old := "old" + string(rune('1'+i))
		keep := []string{old + "/shared/keep1", old + "/shared/sub/keep2"}
		for _, k := range []string{"chk-1/_metadata", "chk-1/a", "shared/keep1", "shared/x", "shared/sub/keep2", "shared/sub/y", "taskowned/z"} {
			e.st.Put(t, old+"/"+k, "d")
		}
		if err := os.Mkdir(e.path(old+"/empty"), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, k := range keep {
			e.ck.Protect(k, old+"/chk-9/_metadata")
		}
		t.Run(tool.name, func(t *testing.T) {
			argv := tool.argv(e.path(old))
			out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
			if tool.says {
				wantErrText(t, tool.name, out, err, e.refuse)
			}
			left := slices.DeleteFunc(e.st.Files(t), func(k string) bool { return !strings.HasPrefix(k, old+"/") })
			if !slices.Equal(left, keep) {
				t.Errorf("left after %s: %v, want exactly %v", tool.name, left, keep)
			}
		})
	}
}

// mvFolderKeepsReferenced: mv of a folder holding a referenced file leaves that file where it was. Where
// a folder rename is one decided change, nothing moves; elsewhere mv copies and unlinks file by file, and
// only the referenced file's unlink is refused.
func mvFolderKeepsReferenced(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	for _, k := range []string{"job/old/ref", "job/old/a", "job/old/sub/b"} {
		e.st.Put(t, k, "d")
	}
	e.ck.Protect("job/old/ref", byChk)
	out, err := exec.Command("mv", e.path("job/old"), e.path("job/new")).CombinedOutput()
	wantErrText(t, "mv", out, err, e.refuse)
	e.intact(t, "after mv", "job/old/ref", "d")
	files := e.st.Files(t)
	wantFiles := []string{"job/old/a", "job/old/ref", "job/old/sub/b"}
	if !h.DirRename {
		wantFiles = []string{"job/new/a", "job/new/ref", "job/new/sub/b", "job/old/ref"}
	}
	if !slices.Equal(files, wantFiles) {
		t.Errorf("after mv: %v, want %v", files, wantFiles)
	}
}

// listingOrder: a folder lists _metadata first, then chk-N folders newest first (odd chk- names after
// them), then everything else, each name once, so recursive deleters retire checkpoints before reaching
// their files.
func listingOrder(t *testing.T, h Harness) {
	e := start(t, h, syscall.EPERM)
	for _, k := range []string{"job/shared/x", "job/chk-9/0a-state", "job/chk-9/_metadata", "job/chk-9/Zstate", "job/chk-9/zz",
		"job/taskowned/y", "job/chk-10/f", "job/chk-100/f", "job/chk-2/_metadata", "job/_metadata", "job/zzz", "job/chk-x/f",
		"job/Apple", "job/9lives"} {
		e.st.Put(t, k, "d")
	}
	if err := os.Mkdir(e.path("job/empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	raw := func(dir string) []string {
		f, err := os.Open(e.path(dir))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		names, err := f.Readdirnames(-1) // the mount's order (os.ReadDir would sort)
		if err != nil {
			t.Fatal(err)
		}
		return names
	}
	for _, tc := range []struct {
		dir  string
		head []string
		all  []string
	}{
		{"job", []string{"_metadata", "chk-100", "chk-10", "chk-9", "chk-2", "chk-x"},
			[]string{"9lives", "Apple", "_metadata", "chk-10", "chk-100", "chk-2", "chk-9", "chk-x", "empty", "shared", "taskowned", "zzz"}},
		{"job/chk-9", []string{"_metadata"}, []string{"0a-state", "Zstate", "_metadata", "zz"}},
	} {
		got := raw(tc.dir)
		if len(got) < len(tc.head) || !slices.Equal(got[:len(tc.head)], tc.head) {
			t.Errorf("%s lists %v, want it to start %v", tc.dir, got, tc.head)
		}
		sorted := slices.Sorted(slices.Values(got))
		if !slices.Equal(sorted, tc.all) {
			t.Errorf("%s lists %v, want each of %v once", tc.dir, got, tc.all)
		}
	}
}
