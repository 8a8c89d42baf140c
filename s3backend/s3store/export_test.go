package s3store

// DescendOnly makes every ListMetadata of s a descent, never a walk instead (a benchmark bucket of
// _metadata without their SSTs is cheaper to walk than to descend; a real one is not).
func DescendOnly(s *Store) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.disc.descendOnly = true
}
