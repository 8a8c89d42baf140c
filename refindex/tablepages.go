package refindex

import "path/filepath"

// releaseTablePages drops the current generation's table files from the process's resident set
// once a pass over them is done (a rebuild, a sync, a loss-check segment, a filter fill): what such
// a pass read stays in the page cache, clean and reclaimable, instead of counting in the mount's RSS
// until the kernel is short of memory (see generation.releaseTablePages). It decides nothing: a
// failure is logged and the index reads on as before. It skips the call while another one runs.
func (ix *Index) releaseTablePages() {
	if !ix.releasing.CompareAndSwap(false, true) {
		return
	}
	defer ix.releasing.Store(false)
	v, err := ix.acquire()
	if err != nil {
		return // closed: its mappings are gone
	}
	defer v.release()
	ix.releaseGenerationPages(v.g)
}

// releaseGenerationPages is releaseTablePages for generation g, whose user the caller holds.
func (ix *Index) releaseGenerationPages(g *generation) {
	dir := filepath.Join(ix.dir, genName(g.n))
	if _, err := g.releaseTablePages(dir); err != nil {
		ix.log.Warn("cannot release the index tables' pages; they stay resident until the kernel reclaims them", "index", dir, "err", err)
	}
}
