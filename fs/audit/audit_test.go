package audit

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"
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
