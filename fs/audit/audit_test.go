package audit

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// AppendJSON must produce what encoding/json would, for every field combination and hostile file names.
func TestAppendJSONMatchesEncodingJSON(t *testing.T) {
	ts := time.Date(2026, 11, 29, 19, 40, 5, 123456789, time.UTC)
	recs := []Record{
		{Time: ts, Op: "unlink", Path: "job/chk-1/_metadata", Decision: "allow", Reason: "allowed", UID: 0},
		{Time: ts, Op: "rename", Path: "a \"quoted\"\\path\n\t\r\x01", To: "b/ü/\u2028", Decision: "refuse", Reason: "referenced",
			Message: "m <&>", Referencing: []string{"j/chk-2/_metadata", "k/chk-3/_metadata"}, RefCount: 7, Errno: "EPERM",
			PID: 4242, UID: 65534, GID: 65534, Comm: "rm"},
		{Time: ts, Op: "unlink", Path: "bad\xffutf8\xc3", Decision: "refuse", Reason: "grace"},
		{Time: ts, Op: "rename", Path: "bad\xffutf8\xc3", PathBytes: []byte("bad\xffutf8\xc3"), To: "x\xfe", ToBytes: []byte("x\xfe"),
			Decision: "allow", Reason: "allowed"},
	}
	for _, r := range recs {
		got := r.AppendJSON(nil)
		var back, want Record
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("invalid JSON %s: %v", got, err)
		}
		wb, _ := json.Marshal(r)
		_ = json.Unmarshal(wb, &want)
		if !reflect.DeepEqual(back, want) {
			t.Errorf("round trip differs:\n got %+v\nwant %+v\n%s\n%s", back, want, got, wb)
		}
	}
}

func TestLogSurvivesTruncatedLastLine(t *testing.T) {
	p := filepath.Join(t.TempDir(), "audit.jsonl")
	l, err := Open(p, Options{FsyncInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := l.Record(&Record{Time: time.Now(), Op: "unlink", Path: string(rune('a' + i)), Decision: "allow", Reason: "allowed"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A crash in the middle of a write leaves a partial last line; readers keep everything before it.
	f, _ := os.OpenFile(p, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString(`{"time":"2026-`)
	f.Close()
	recs, err := ReadFile(p)
	if err != nil || len(recs) != 3 || recs[2].Path != "c" {
		t.Fatalf("got %d records, %v", len(recs), err)
	}
	if st, _ := os.Stat(p); st.Mode().Perm() != 0o600 {
		t.Errorf("audit log mode %v, want 0600", st.Mode().Perm())
	}
}

// The exact bytes of a record are part of the log format that operators grep and ship: a golden file pins
// them (field order, omitted empty fields, escapes). Regenerate with -update after a deliberate change.
func TestAppendJSONGolden(t *testing.T) {
	ts := time.Date(2026, 11, 29, 19, 40, 5, 120000000, time.UTC)
	recs := []Record{
		{Time: ts, Op: "unlink", Path: "job/shared/sst-1", Decision: "allow", Reason: "allowed", UID: 1000, GID: 1000, PID: 77, Comm: "rm"},
		{Time: ts, Op: "rename", Path: "job/chk-9", To: "trash/chk-9", Decision: "refuse", Reason: "referenced",
			Message: "referenced by 2 live checkpoint(s)", Referencing: []string{"job/chk-10/_metadata", "job/chk-11/_metadata"},
			RefCount: 2, Errno: "EPERM", PID: 4242, Comm: "mv"},
		{Time: ts, Op: "unlink", Path: "q\"b\\s\x00\x1f\x7f<&>\u2028\u2029\xff\xfe\xc3", Decision: "refuse", Reason: "grace", Errno: "EPERM"},
		{Time: ts, Op: "index-deleted", Path: "j/_metadata", Decision: "error", Reason: "index-notify-failed", Message: "disk full"},
	}
	var got []byte
	for _, r := range recs {
		got = append(r.AppendJSON(got), '\n')
	}
	golden := filepath.Join("testdata", "records.golden.jsonl")
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("audit encoding changed:\n got %s\nwant %s", got, want)
	}
	// And the golden lines are what encoding/json reads back as the records (invalid UTF-8 as U+FFFD).
	for i, r := range recs {
		checkRoundTrip(t, &r, []byte(strings.Split(string(want), "\n")[i]))
	}
}

var update = flag.Bool("update", false, "rewrite golden files")

// checkRoundTrip decodes line and compares it with what encoding/json makes of r.
func checkRoundTrip(t testing.TB, r *Record, line []byte) {
	t.Helper()
	var back, want Record
	if err := json.Unmarshal(line, &back); err != nil {
		t.Fatalf("invalid JSON %q: %v", line, err)
	}
	wb, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(wb, &want); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, want) {
		t.Fatalf("round trip differs:\n got %+v\nwant %+v\nline %q\njson %q", back, want, line, wb)
	}
}

// FuzzAppendJSON: whatever bytes a file name, message or command holds, the line is one valid JSON object
// without a raw newline (one record per line) that decodes to what encoding/json would encode.
func FuzzAppendJSON(f *testing.F) {
	f.Add("unlink", "job/chk-1/_metadata", "", "referenced", "msg", "j/chk-2/_metadata", "rm", int64(1764445205123456789), uint32(42), 3)
	f.Add("rename", "a\"b\\c\n\r\t\x00\x1f", "b/ü/\u2028", "grace", "<&>", "\xff\xfe", "\xc3", int64(0), uint32(0), 0)
	f.Fuzz(func(t *testing.T, op, p, to, reason, msg, ref, comm string, nanos int64, pid uint32, refCount int) {
		r := Record{Time: time.Unix(0, nanos).UTC(), Op: op, Decision: "refuse", Reason: reason,
			Message: msg, RefCount: refCount, Errno: "EPERM", PID: pid, UID: pid / 3, GID: pid / 5, Comm: comm}
		r.SetNames(p, to)
		if !utf8.ValidString(p) && !bytes.Equal(r.PathBytes, []byte(p)) {
			t.Fatalf("path %q: path_bytes %q", p, r.PathBytes)
		}
		if ref != "" {
			r.Referencing = []string{ref, p}
		}
		line := r.AppendJSON(nil)
		if i := strings.IndexByte(string(line), '\n'); i >= 0 {
			t.Fatalf("raw newline at %d in %q", i, line)
		}
		checkRoundTrip(t, &r, line)
	})
}

func BenchmarkAppendJSON(b *testing.B) {
	r := Record{Time: time.Now().UTC(), Op: "unlink", Path: "job_old/shared/d001/sst-000001", Decision: "allow",
		Reason: "allowed", Message: "unlink job_old/shared/d001/sst-000001: referenced by no live checkpoint",
		PID: 4242, UID: 1000, GID: 1000, Comm: "rm"}
	buf := make([]byte, 0, 512)
	b.ReportAllocs()
	for b.Loop() {
		buf = r.AppendJSON(buf[:0])
	}
}

func BenchmarkRecord(b *testing.B) {
	l, err := Open(filepath.Join(b.TempDir(), "audit.jsonl"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	r := Record{Time: time.Now().UTC(), Op: "unlink", Path: "job_old/shared/d001/sst-000001", Decision: "allow",
		Reason: "allowed", PID: 4242, UID: 1000, GID: 1000, Comm: "rm"}
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Record(&r); err != nil {
			b.Fatal(err)
		}
	}
}
