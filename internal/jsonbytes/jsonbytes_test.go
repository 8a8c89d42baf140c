package jsonbytes_test

import (
	"encoding/base64"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/internal/jsonbytes"
)

type inner struct {
	Name  string   `json:"name"`
	Names []string `json:"names,omitempty"`
}

type outer struct {
	Path    string            `json:"path"`
	When    time.Time         `json:"when"`
	Age     duration.D        `json:"age"`
	Raw     []byte            `json:"raw,omitempty"`
	Inner   *inner            `json:"inner,omitempty"`
	List    []inner           `json:"list"`
	ByName  map[string]string `json:"by_name,omitempty"`
	Any     any               `json:"any,omitempty"`
	private string
}

const bad = "job/chk-1/\xff\xfe\x01f" // not valid UTF-8: JSON alone would make it "job/chk-1/\uFFFD\uFFFD\u0001f"

// Every string of a value, at any depth (fields, pointers, slices, map keys and values,
// interfaces), arrives with its exact bytes after Escape, encoding/json and Unescape; a valid string
// that looks escaped arrives as itself; the value escaped is never changed.
func TestEscapeRoundTrip(t *testing.T) {
	when := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	in := outer{Path: bad, When: when, Age: duration.D(time.Hour), Raw: []byte{0xff}, Inner: &inner{Name: bad, Names: []string{"ok", bad}},
		List: []inner{{Name: "plain"}, {Name: "\x00b64:looks escaped"}}, ByName: map[string]string{bad: bad, "k": "v"}, Any: bad, private: bad}
	keep := in
	keepInner := *in.Inner
	keepNames := append([]string(nil), in.Inner.Names...)
	b, err := json.Marshal(jsonbytes.Escape(in))
	if err != nil {
		t.Fatal(err)
	}
	if strings.ContainsRune(string(b), '\uFFFD') {
		t.Fatalf("escaped JSON holds U+FFFD: %s", b)
	}
	var out outer
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if err := jsonbytes.Unescape(&out); err != nil {
		t.Fatal(err)
	}
	in.private = ""
	in.Any = any(bad)
	if !reflect.DeepEqual(out, in) {
		t.Errorf("round trip:\n got %#v\nwant %#v", out, in)
	}
	if !reflect.DeepEqual(keep.Inner, &keepInner) || !reflect.DeepEqual(keep.Inner.Names, keepNames) || keep.Path != bad {
		t.Error("Escape changed the value it escaped")
	}
	// nothing to escape: the value itself
	plain := &inner{Name: "a"}
	if jsonbytes.Escape(plain) != any(plain) {
		t.Error("Escape copied a value with nothing to escape")
	}
	var broken inner
	if err := json.Unmarshal([]byte(`{"name":"\u0000b64:!!"}`), &broken); err != nil {
		t.Fatal(err)
	}
	if err := jsonbytes.Unescape(&broken); err == nil {
		t.Error("Unescape accepted a malformed escaped string")
	}
}

// For people and jq, an escaped string shows its text with U+FFFD and its exact bytes beside it, in
// base64: NAME_bytes for a member, a parallel array with null for valid elements of an array; a
// member that already has its NAME_bytes keeps that one; JSON without escaped strings is unchanged.
func TestPrintable(t *testing.T) {
	type entry struct {
		Path      string   `json:"path"`
		PathBytes []byte   `json:"path_bytes,omitempty"`
		Refs      []string `json:"refs"`
		N         int      `json:"n"`
	}
	v := []entry{{Path: bad, PathBytes: []byte(bad), Refs: []string{"a", bad}, N: 1}, {Path: "x", Refs: []string{bad}, N: 2}, {Path: bad, N: 3}}
	b, err := json.Marshal(jsonbytes.Escape(v))
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonbytes.Printable(b)
	if err != nil {
		t.Fatal(err)
	}
	var got []map[string]any
	if err := json.Unmarshal(p, &got); err != nil {
		t.Fatalf("%v: %s", err, p)
	}
	const shown = "job/chk-1/\uFFFD\uFFFD\x01f"
	enc := base64.StdEncoding.EncodeToString([]byte(bad))
	want := []map[string]any{
		{"path": shown, "path_bytes": enc, "refs": []any{"a", shown}, "refs_bytes": []any{nil, enc}, "n": 1.0},
		{"path": "x", "refs": []any{shown}, "refs_bytes": []any{enc}, "n": 2.0},
		{"path": shown, "path_bytes": enc, "refs": nil, "n": 3.0},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Printable:\n got %v\nwant %v\n(%s)", got, want, p)
	}
	if !strings.HasPrefix(string(p), `[{"path":`) || strings.Index(string(p), `"refs"`) > strings.Index(string(p), `"n"`) {
		t.Errorf("members out of order: %s", p)
	}
	plain := []byte(`{"b":1,"a":"x"}`)
	if q, err := jsonbytes.Printable(plain); err != nil || string(q) != string(plain) {
		t.Errorf("Printable(%s) = %s %v", plain, q, err)
	}
}
