package storeid

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mkIndex makes an index folder named name in root, recording id when id.Kind is set.
func mkIndex(t *testing.T, root, name string, id Identity) string {
	t.Helper()
	dir := filepath.Join(root, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if id.Kind != "" {
		if err := Write(dir, id); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func noneLive(string) bool { return false }

// TestSymlinkedStoreIsTheSameStore: a store reached through a symlink has the identity of its real
// path, so it finds the index folder recorded for the store at its real path (the default index of
// a mount given the real path), not a second one named after the symlink.
func TestSymlinkedStoreIsTheSameStore(t *testing.T) {
	base := t.TempDir()
	real := filepath.Join(base, "real", "store")
	if err := os.MkdirAll(real, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("real", filepath.Join(base, "other")); err != nil {
		t.Fatal(err)
	}
	viaLink := filepath.Join(base, "other", "store")
	a, b := OfLocal(real), OfLocal(viaLink)
	if !a.Same(b) || a.Key != b.Key || a.FolderName() != b.FolderName() {
		t.Fatalf("identities differ: %+v vs %+v", a, b)
	}
	if a.Ino == 0 {
		t.Fatalf("no inode recorded: %+v", a)
	}
	root := filepath.Join(base, "cache")
	want := mkIndex(t, root, a.FolderName(), a)
	// The spelling an earlier version hashed (the symlinked path as written) names no folder: found
	// by identity.
	f, err := Find(root, b, []string{viaLink}, noneLive)
	if err != nil {
		t.Fatal(err)
	}
	if f.Dir != want || len(f.Others) != 0 {
		t.Fatalf("Find through the symlink = %+v, want %s alone", f, want)
	}
}

// TestSameRootInodeIsTheSameStore: two real paths of one directory (a bind mount) share device and
// inode: the same store; a key alone or another inode is another store.
func TestSameRootInodeIsTheSameStore(t *testing.T) {
	a := Identity{Kind: Local, Key: "/srv/ckpt", Dev: 7, Ino: 42}
	for _, tc := range []struct {
		name string
		b    Identity
		same bool
	}{
		{"bind mount: other path, same inode", Identity{Kind: Local, Key: "/mnt/bind/ckpt", Dev: 7, Ino: 42}, true},
		{"same path", Identity{Kind: Local, Key: "/srv/ckpt"}, true},
		{"other inode", Identity{Kind: Local, Key: "/mnt/ckpt", Dev: 7, Ino: 43}, false},
		{"other device", Identity{Kind: Local, Key: "/mnt/ckpt", Dev: 8, Ino: 42}, false},
		{"unknown inodes never match", Identity{Kind: Local, Key: "/mnt/ckpt"}, false},
		{"remote with the same key", Identity{Kind: Remote, Key: "/srv/ckpt"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := a.Same(tc.b); got != tc.same {
				t.Errorf("Same(%+v) = %v, want %v", tc.b, got, tc.same)
			}
		})
	}
	if (Identity{Kind: Local, Key: "/a"}).Same(Identity{Kind: Local, Key: "/b"}) {
		t.Error("two stores of unknown inode matched by their zero inodes")
	}
}

// TestFindChoosesOneIndexPerStore: the folders of one store are found whatever name they have, one
// is chosen and the others are named for the caller to report; a folder recorded for another store
// is never taken.
func TestFindChoosesOneIndexPerStore(t *testing.T) {
	id := Identity{Kind: Local, Key: "/srv/ckpt", Dev: 7, Ino: 42, Store: "/srv/ckpt"}
	bind := Identity{Kind: Local, Key: "/mnt/bind/ckpt", Dev: 7, Ino: 42}
	other := Identity{Kind: Local, Key: "/srv/other", Dev: 7, Ino: 99}
	legacy := HashName("/data/link/ckpt") // an earlier version's name: the path as spelt
	for _, tc := range []struct {
		name    string
		setup   func(root string) // makes the folders
		live    []string          // folder names a mount answers in
		want    string            // chosen folder name
		others  []string
		wantErr string
	}{
		{name: "nothing yet: the store's own name", setup: func(string) {}, want: id.FolderName()},
		{name: "own name exists", setup: func(r string) { mkIndex(t, r, id.FolderName(), id) }, want: id.FolderName()},
		{name: "earlier version's folder, no identity", setup: func(r string) { mkIndex(t, r, legacy, Identity{}) }, want: legacy},
		{name: "recorded through a bind mount", setup: func(r string) { mkIndex(t, r, bind.FolderName(), bind) }, want: bind.FolderName()},
		{name: "own name but another store's identity", setup: func(r string) { mkIndex(t, r, id.FolderName(), other) }, wantErr: "belongs to the store"},
		{name: "earlier version's name recorded for another store", setup: func(r string) { mkIndex(t, r, legacy, other) }, want: id.FolderName()},
		{name: "own and earlier: own used, earlier named", setup: func(r string) {
			mkIndex(t, r, id.FolderName(), id)
			mkIndex(t, r, legacy, Identity{})
		}, want: id.FolderName(), others: []string{legacy}},
		{name: "the live one wins over the own name", setup: func(r string) {
			mkIndex(t, r, id.FolderName(), id)
			mkIndex(t, r, bind.FolderName(), bind)
		}, live: []string{bind.FolderName()}, want: bind.FolderName(), others: []string{id.FolderName()}},
		{name: "two live mounts of one store", setup: func(r string) {
			mkIndex(t, r, id.FolderName(), id)
			mkIndex(t, r, bind.FolderName(), bind)
		}, live: []string{id.FolderName(), bind.FolderName()}, wantErr: "more than one running mount"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			tc.setup(root)
			live := func(dir string) bool {
				for _, n := range tc.live {
					if dir == filepath.Join(root, n) {
						return true
					}
				}
				return false
			}
			f, err := Find(root, id, []string{"/data/link/ckpt"}, live)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Find = %+v, %v; want an error with %q", f, err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if f.Dir != filepath.Join(root, tc.want) {
				t.Errorf("Dir = %s, want %s", f.Dir, tc.want)
			}
			var others []string
			for _, o := range f.Others {
				others = append(others, filepath.Base(o))
			}
			if strings.Join(others, ",") != strings.Join(tc.others, ",") {
				t.Errorf("Others = %v, want %v", others, tc.others)
			}
		})
	}
}

// TestDamagedIdentityFailsClosed: a damaged identity file could hide a second index of the store, so
// Find refuses and names the file to remove.
func TestDamagedIdentityFailsClosed(t *testing.T) {
	root := t.TempDir()
	dir := mkIndex(t, root, "0123456789abcdef", Identity{})
	if err := os.WriteFile(filepath.Join(dir, FileName), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Find(root, Identity{Kind: Local, Key: "/srv/ckpt"}, nil, noneLive)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
		t.Fatalf("Find with a damaged identity file: %v", err)
	}
}
