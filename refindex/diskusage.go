package refindex

import (
	"io/fs"
	"syscall"
)

// allocatedBytes is the disk space fi takes (st_blocks × 512, as du counts it), which for a sparse
// file is far below its size; its size where the file system does not say.
func allocatedBytes(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Blocks * 512
	}
	return fi.Size()
}
