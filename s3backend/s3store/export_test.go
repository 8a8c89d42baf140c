package s3store

// DescendOnly makes every ListMetadata of s a descent, never a walk instead (a benchmark bucket of
// _metadata without their SSTs is cheaper to walk than to descend; a real one is not).
func DescendOnly(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disc.descendOnly = true
}

// HeadOnly reports whether the descent HEADs the checkpoints of job (a listing prefix ending in '/')
// for now rather than listing them flat.
func HeadOnly(s *Store, job string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.disc.headJobs[job] > 0
}

// HeadsOnly makes the descent of s HEAD every checkpoint, never list checkpoint folders flat (the
// descent as it was before, for benchmarks side by side).
func HeadsOnly(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disc.headsOnly = true
}
