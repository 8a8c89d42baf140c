package refindex

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// removeEmptyBadgerLogs deletes zero-byte write-ahead (.mem) and value-log (.vlog) files from the
// badger directory dir and returns their names.
//
// Why: badger creates such a file and sizes it in two system calls. A process killed between them
// (kill -9 of the mount during a sync, say) leaves a zero-byte file, and badger v4 then refuses to
// open the directory ("while opening memtables err: while opening fid: N err: Create a new file";
// dgraph-io/badger#2207). A zero-byte log holds no entry, not even its header, so nothing that was
// committed lives in it and removing it loses nothing.
func removeEmptyBadgerLogs(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read index generation %s: %w", dir, err)
	}
	var removed []string
	for _, e := range ents {
		name := e.Name()
		if !e.Type().IsRegular() || !(strings.HasSuffix(name, ".mem") || strings.HasSuffix(name, ".vlog")) {
			continue
		}
		fi, err := e.Info()
		if err != nil || fi.Size() != 0 {
			continue
		}
		if err := os.Remove(filepath.Join(dir, name)); err != nil {
			return removed, fmt.Errorf("remove empty log %s left by a crash: %w", filepath.Join(dir, name), err)
		}
		removed = append(removed, name)
	}
	return removed, nil
}
