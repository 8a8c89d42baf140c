// Package storeid names a checkpoint store by what it is rather than by how a command line spelt it,
// so that every spelling of one store (a symlink, a bind mount, s3a:// for s3://, a trailing slash)
// finds the one default index folder of that store, and a second index of the same store is never
// created without a word (a second index is a second, unguarded set of pins and quarantine writers).
//
// An Identity is recorded in each default index folder (FileName). For a local store it is the real
// path (symlinks resolved) and the device and inode of the store's root, so two paths of one directory
// through a bind mount, which keep their own real paths, are still the same store. For S3 and HDFS it
// is the normalised URI (bucket and prefix; authority and clean path).
package storeid

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// FileName is the identity file's name inside a default index folder.
const FileName = "store-identity.json"

// Kinds of store.
const (
	Local  = "local"
	Remote = "remote" // S3 or HDFS: Key is the normalised URI, scheme included
)

// Identity is what a store is. Store is the spelling it was first recorded under (for the operator).
type Identity struct {
	Kind  string `json:"kind"`
	Key   string `json:"key"`
	Dev   uint64 `json:"dev,omitempty"`
	Ino   uint64 `json:"ino,omitempty"`
	Store string `json:"store,omitempty"`
}

// OfLocal is the identity of the local store directory dir. A directory that cannot be stat'ed (it does
// not exist yet, or is unreachable) is named by its absolute path alone; opening the store then fails
// with its own error.
func OfLocal(dir string) Identity {
	abs, err := filepath.Abs(dir)
	if err != nil {
		abs = filepath.Clean(dir)
	}
	id := Identity{Kind: Local, Key: abs, Store: dir}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		id.Key = real
	}
	var st syscall.Stat_t
	if err := syscall.Stat(id.Key, &st); err == nil {
		id.Dev, id.Ino = uint64(st.Dev), st.Ino
	}
	return id
}

// OfRemote is the identity of an S3 or HDFS store whose normalised URI is key.
func OfRemote(key, store string) Identity { return Identity{Kind: Remote, Key: key, Store: store} }

// Same reports whether a and b are one store: the same key, or, for local stores, the same device and
// inode of the root (a bind mount shows one directory under two real paths).
func (a Identity) Same(b Identity) bool {
	if a.Kind != b.Kind {
		return false
	}
	if a.Key == b.Key {
		return true
	}
	return a.Kind == Local && a.Ino != 0 && a.Dev == b.Dev && a.Ino == b.Ino
}

// FolderName is the name of the store's default index folder: a hash of its key. For a store spelt
// the way it is (a real absolute path; a normalised URI) it is the name earlier versions gave the
// folder, so their indexes are found under it.
func (a Identity) FolderName() string { return HashName(a.Key) }

// HashName is the folder name earlier versions derived from the store as spelt on the command line
// (the absolute path, symlinks unresolved; the URI as written).
func HashName(spelling string) string {
	h := sha256.Sum256([]byte(spelling))
	return hex.EncodeToString(h[:8])
}

// Read reads the identity recorded in the index folder dir; ok is false when none is recorded (an
// index folder of an earlier version, or one given with --index).
func Read(dir string) (id Identity, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, FileName))
	if errors.Is(err, fs.ErrNotExist) {
		return Identity{}, false, nil
	}
	if err != nil {
		return Identity{}, false, fmt.Errorf("read store identity of index folder %s: %w", dir, err)
	}
	if err := json.Unmarshal(b, &id); err != nil || id.Kind == "" || id.Key == "" {
		return Identity{}, false, fmt.Errorf("store identity %s is damaged (remove it: the next command rewrites it): %v", filepath.Join(dir, FileName), err)
	}
	return id, true, nil
}

// Write records id in the index folder dir (which must exist), replacing what was recorded, through a
// temporary file and a rename, so a reader never sees half of it.
func Write(dir string, id Identity) error {
	b, err := json.MarshalIndent(id, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, FileName+".tmp-*")
	if err != nil {
		return fmt.Errorf("record store identity in index folder %s: %w", dir, err)
	}
	_, err = tmp.Write(append(b, '\n'))
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(dir, FileName))
	}
	if err != nil {
		os.Remove(tmp.Name())
		return fmt.Errorf("record store identity in index folder %s: %w", dir, err)
	}
	return nil
}
