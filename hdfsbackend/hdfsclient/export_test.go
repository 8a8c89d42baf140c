package hdfsclient

// Rename2 sends the NameNode's rename2 with the given overwriteDest and nothing else (no look at the
// target), so tests see what the NameNode itself does.
func Rename2(c *Client, from, to string, overwrite bool) error {
	return wrap("rename", from, rename2(c.nn, from, to, overwrite))
}
