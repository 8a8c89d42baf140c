package refindex

// SetReadWholeMax lowers the size up to which a _metadata is read whole (tests of the streaming
// path); call the returned function to restore it.
func SetReadWholeMax(n int64) (restore func()) {
	old := readWholeMax
	readWholeMax = n
	return func() { readWholeMax = old }
}
