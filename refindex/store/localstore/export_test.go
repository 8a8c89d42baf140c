package localstore

import "time"

// StoreTimeNamed reads the store's clock through the named probe file (the path taken on file systems
// without O_TMPFILE, such as NFS).
func StoreTimeNamed(s *Store) (time.Time, error) { return s.probeNamed() }
