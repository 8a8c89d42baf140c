package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// --json carries a name that is not valid UTF-8 losslessly: beside its text (U+FFFD for the invalid
// bytes, all JSON can show) the exact bytes in NAME_bytes, base64, from which a script finds the file.
func TestJSONKeepsNameBytes(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	dir := t.TempDir()
	store := filepath.Join(dir, "store")
	key := "job/chk-1/a\xff\x01b"
	if err := os.MkdirAll(filepath.Join(store, "job/chk-1"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(store, key), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := runBinary(t, "why", "--store", store, "--index", filepath.Join(dir, "index"), key, "--json")
	var doc map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &doc); err != nil {
		t.Fatalf("why --json (exit %d): %v\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	b64, _ := doc["path_bytes"].(string)
	got, err := base64.StdEncoding.DecodeString(b64)
	if err != nil || string(got) != key {
		t.Fatalf("path_bytes %q (%v) is not the key %q:\n%s", b64, err, key, r.stdout)
	}
	if doc["path"] != "job/chk-1/a\uFFFD\x01b" {
		t.Errorf("path %q", doc["path"])
	}
	if _, err := os.Stat(filepath.Join(store, string(got))); err != nil {
		t.Errorf("the file named by path_bytes: %v", err)
	}
}
