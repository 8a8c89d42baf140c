package mountutil

import (
	"fmt"
	"os"
	"strconv"
)

// SetKernelReadAhead sets read_ahead_kb of the FUSE mount's backing device info
// (/sys/class/bdi/MAJOR:MINOR), which the kernel creates per FUSE mount with 128 KiB whatever
// max_readahead the INIT reply asks for: raised, a sequential reader's data arrives in READ requests as
// large as the mount's MaxReadAhead. It needs root; bytes < 0 leaves the kernel's default.
func SetKernelReadAhead(mnt string, bytes int64) error {
	if bytes < 0 {
		return nil
	}
	// The device is read from the mount table, not by a stat of mnt: the daemon calling this serves
	// mnt, and never makes a request to its own mount (killed while waiting on one, it cannot exit).
	mi, err := Lookup(mnt)
	if err != nil {
		return err
	}
	if mi == nil || mi.Dev == "" {
		return fmt.Errorf("read-ahead of %s: not in the mount table", mnt)
	}
	p := fmt.Sprintf("/sys/class/bdi/%s/read_ahead_kb", mi.Dev)
	return os.WriteFile(p, []byte(strconv.FormatInt(bytes>>10, 10)), 0o644)
}
