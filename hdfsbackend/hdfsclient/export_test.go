package hdfsclient

import (
	"errors"
	"fmt"
	"math"

	"github.com/jcmturner/gokrb5/v8/credentials"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
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

// SetSpaceQuota sets (bytes > 0) or clears (bytes <= 0) dir's space quota in raw bytes, as `hdfs
// dfsadmin -setSpaceQuota/-clrSpaceQuota` (superuser only), leaving its name quota: ClientProtocol's
// setQuota, with the library's own message types (registered globally by its generated code).
func SetSpaceQuota(c *Client, dir string, bytes int64) error {
	newMsg := func(name string) (protoreflect.Message, error) {
		mt, err := protoregistry.GlobalTypes.FindMessageByName(protoreflect.FullName("hadoop.hdfs." + name))
		if err != nil {
			return nil, fmt.Errorf("setQuota: %s: %w", name, err)
		}
		return mt.New(), nil
	}
	req, err := newMsg("SetQuotaRequestProto")
	if err != nil {
		return err
	}
	resp, err := newMsg("SetQuotaResponseProto")
	if err != nil {
		return err
	}
	const dontSet = math.MaxInt64   // HdfsConstants.QUOTA_DONT_SET
	space := uint64(math.MaxUint64) // QUOTA_RESET (-1)
	if bytes > 0 {
		space = uint64(bytes)
	}
	f := req.Descriptor().Fields()
	req.Set(f.ByName("path"), protoreflect.ValueOfString(dir))
	req.Set(f.ByName("namespaceQuota"), protoreflect.ValueOfUint64(dontSet))
	req.Set(f.ByName("storagespaceQuota"), protoreflect.ValueOfUint64(space))
	return wrap("setQuota", dir, c.gen.nn("setQuota", req.Interface(), resp.Interface()))
}
