package main

import (
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ckguard/ckguard/internal/storeid"
)

// TestDefaultIndexOfASymlinkedStore: without --index, the store given through a symlink and at its
// real path is one store with one default index folder: a pin made through the symlink is the pin
// the real path sees (and a mount of it would open), and the folder records the store's identity.
// An index folder left under the name an earlier version gave the symlinked spelling is named in a
// warning (which one is used, how to remove the other), never used silently beside the store's own.
func TestDefaultIndexOfASymlinkedStore(t *testing.T) {
	cs := newCLIStore(t)
	base := t.TempDir()
	link := filepath.Join(base, "link")
	if err := os.Symlink(cs.store, link); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(base, "cache")
	t.Setenv("XDG_CACHE_HOME", cache)
	ck := path.Dir(cs.savepoint + "/_metadata")

	if r := runBinary(t, "pin", "--store", link, ck); r.code != 0 {
		t.Fatalf("pin through the symlink: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	r := runBinary(t, "checkpoints", "--store", cs.store, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"pinned": true`) {
		t.Fatalf("checkpoints at the real path: exit %d, no pinned checkpoint: %s%s", r.code, r.stdout, r.stderr)
	}
	ents, err := os.ReadDir(filepath.Join(cache, "ckguard"))
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 {
		t.Fatalf("index folders %v, want one", ents)
	}
	own := filepath.Join(cache, "ckguard", ents[0].Name())
	id, ok, err := storeid.Read(own)
	if err != nil || !ok || !id.Same(storeid.OfLocal(cs.store)) {
		t.Fatalf("identity recorded in %s: %+v %v %v", own, id, ok, err)
	}

	// An earlier version's folder for the symlinked spelling: warned about, not used.
	legacy := filepath.Join(cache, "ckguard", storeid.HashName(link))
	if err := os.MkdirAll(legacy, 0o700); err != nil {
		t.Fatal(err)
	}
	r = runBinary(t, "checkpoints", "--store", link, "--json")
	if r.code != 0 || !strings.Contains(r.stdout, `"pinned": true`) {
		t.Fatalf("checkpoints through the symlink beside an old folder: exit %d: %s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stderr, legacy) || !strings.Contains(r.stderr, "using "+own) || !strings.Contains(r.stderr, "rm -rf "+legacy) {
		t.Errorf("no warning naming the second folder %s, the one used and how to remove it: %s", legacy, r.stderr)
	}
	if strings.Count(r.stderr, "second index folder") != 1 {
		t.Errorf("the warning is given once per command: %s", r.stderr)
	}
}
