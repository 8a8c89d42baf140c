package storeid

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
)

// Found is the default index folder chosen for a store, and what else was found for it.
type Found struct {
	Dir  string // the folder to use (it may not exist yet)
	Live bool   // a running mount answers on Dir's control socket
	// Others are the other existing index folders of the same store (an earlier version's name for
	// it, or one made through another path), not used.
	Others []string
}

// Find chooses the default index folder of the store id among the folders in root (the user's
// ckguard cache folder). The folders of the store are: its own name (id.FolderName()), the names
// earlier versions derived from spellings (HashName), and every folder whose recorded identity is
// the same store; a folder whose recorded identity is another store's is never one of them. live
// tells whether a running mount answers in a folder.
//
// Chosen is the folder a running mount answers in (two of them for one store is an error: each
// would keep its own pins); else the store's own name when it exists; else the one existing folder;
// else, of several, the first with a recorded identity, then by name; else (none exists) the
// store's own name. The rest are Others, for the caller to report: one index per store, never a
// second one without a word.
func Find(root string, id Identity, spellings []string, live func(dir string) bool) (Found, error) {
	own := filepath.Join(root, id.FolderName())
	recorded := map[string]bool{}
	var cands []string
	seen := map[string]bool{}
	add := func(dir string, rec bool) {
		if !seen[dir] {
			seen[dir] = true
			cands = append(cands, dir)
		}
		recorded[dir] = recorded[dir] || rec
	}
	names := []string{id.FolderName()}
	for _, s := range spellings {
		names = append(names, HashName(s))
	}
	for _, n := range names {
		dir := filepath.Join(root, n)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			continue
		}
		rid, ok, err := Read(dir)
		if err != nil {
			return Found{}, err
		}
		if ok && !rid.Same(id) {
			if dir == own {
				// Only a collision of the hashes: the folder is another store's and cannot be this one's.
				return Found{}, fmt.Errorf("index folder %s belongs to the store %s, not to %s: give this store its own with --index", dir, rid.Store, id.Store)
			}
			continue // an earlier version's name of what this spelling named before (a symlink moved since)
		}
		add(dir, ok)
	}
	ents, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return Found{}, fmt.Errorf("list index folders in %s: %w", root, err)
	}
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		rid, ok, err := Read(dir)
		if err != nil {
			return Found{}, err
		}
		if ok && rid.Same(id) {
			add(dir, true)
		}
	}
	sort.SliceStable(cands, func(i, j int) bool {
		ri, rj := rank(cands[i], own, recorded), rank(cands[j], own, recorded)
		if ri != rj {
			return ri < rj
		}
		return cands[i] < cands[j]
	})
	var lives []string
	for _, d := range cands {
		if live(d) {
			lives = append(lives, d)
		}
	}
	switch {
	case len(lives) > 1:
		return Found{}, fmt.Errorf("store %s is guarded by more than one running mount, each with its own index (%s and %s): each keeps its own pins, so neither is complete; unmount all but one (`ckguard umount MOUNTPOINT`)", id.Store, lives[0], lives[1])
	case len(lives) == 1:
		return Found{Dir: lives[0], Live: true, Others: without(cands, lives[0])}, nil
	case len(cands) == 0:
		return Found{Dir: own}, nil
	}
	return Found{Dir: cands[0], Others: cands[1:]}, nil
}

// rank orders candidate folders: the store's own name, then folders with a recorded identity, then
// the rest (an earlier version's folder).
func rank(dir, own string, recorded map[string]bool) int {
	switch {
	case dir == own:
		return 0
	case recorded[dir]:
		return 1
	}
	return 2
}

func without(l []string, x string) []string {
	var out []string
	for _, s := range l {
		if s != x {
			out = append(out, s)
		}
	}
	return out
}
