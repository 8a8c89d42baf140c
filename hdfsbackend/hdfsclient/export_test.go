package hdfsclient

import (
	"errors"

	"github.com/jcmturner/gokrb5/v8/credentials"
)

// Rename2 sends the NameNode's rename2 with the given overwriteDest and nothing else (no look at the
// target), so tests see what the NameNode itself does.
func Rename2(c *Client, from, to string, overwrite bool) error {
	return wrap("rename", from, rename2(c.gen.nn, from, to, overwrite))
}

// ReloadTicketCache rereads the ticket cache file path into c as the ticket watch does when the cache
// was renewed, and reports whether the client's generation changed.
func ReloadTicketCache(c *Client, path string) (bool, error) {
	cc, err := credentials.LoadCCache(path)
	if err != nil {
		return false, err
	}
	if c.reloadCache == nil {
		return false, errors.New("not a ticket-cache login")
	}
	current := func() *generation {
		c.genMu.RLock()
		defer c.genMu.RUnlock()
		return c.gen
	}
	before := current()
	err = c.reloadCache(cc)
	return before != current(), err
}
