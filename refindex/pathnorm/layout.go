package pathnorm

import (
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
)

// JobFolder returns the job folder a store key belongs to by layout (the directory holding chk-N/,
// shared/, taskowned/), or "" when the key does not follow the layout. With an entropy key
// configured, a data key such as ab12/flink/<job>/shared/x is attributed to the entropy-free folder
// flink/<job> when known(folder) says that folder holds checkpoints.
func (n *Normalizer) JobFolder(key string, known func(string) bool) string {
	segs := strings.Split(key, "/")
	pos := -1
	for i, s := range segs[:max(0, len(segs)-1)] {
		if flinklayout.IsJobFolderEntry(s) {
			pos = i
			break
		}
	}
	if pos < 0 {
		return ""
	}
	folder := strings.Join(segs[:pos], "/")
	if known == nil || known(folder) || n.cfg.EntropyKey == "" {
		return folder
	}
	for drop := 0; drop < pos; drop++ {
		cand := append(append([]string{}, segs[:drop]...), segs[drop+1:pos]...)
		if f := strings.Join(cand, "/"); known(f) {
			return f
		}
	}
	return folder
}
