package mountutil

import (
	"fmt"
	"os"
	"strconv"
	"syscall"

	"golang.org/x/sys/unix"
)

// SetKernelReadAhead sets read_ahead_kb of the FUSE mount's backing device info
// (/sys/class/bdi/MAJOR:MINOR), which the kernel creates per FUSE mount with 128 KiB whatever
// max_readahead the INIT reply asks for: raised, a sequential reader's data arrives in READ requests as
// large as the mount's MaxReadAhead. It needs root; bytes < 0 leaves the kernel's default.
func SetKernelReadAhead(mnt string, bytes int64) error {
	if bytes < 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return err
	}
	p := fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", unix.Major(st.Dev), unix.Minor(st.Dev))
	return os.WriteFile(p, []byte(strconv.FormatInt(bytes>>10, 10)), 0o644)
}
