package s3quarantine

import (
	"context"
	"fmt"
	"strings"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// MarkerFinder answers the loss check on a versioned bucket: a referenced object missing from the store
// may be hidden by a delete marker (`aws s3 rm`, a script, a lifecycle expiration on another host), and
// is then restorable by removing the marker. It names the marker and the command that removes it.
type MarkerFinder struct {
	c interface {
		Versions(ctx context.Context, key string) ([]s3client.Version, error)
		Location() s3client.Location
	}
}

// NewMarkerFinder returns the delete-marker finder of the versioned bucket c reaches.
func NewMarkerFinder(c *s3client.Client) *MarkerFinder { return &MarkerFinder{c: c} }

var _ refindex.QuarantineFinder = (*MarkerFinder)(nil)

// FindQuarantined reports a delete marker that is key's latest version over an object version.
func (m *MarkerFinder) FindQuarantined(ctx context.Context, key string) (refindex.QuarantinedObject, bool, error) {
	vs, err := m.c.Versions(ctx, key)
	if err != nil {
		return refindex.QuarantinedObject{}, false, fmt.Errorf("versions of %s: %w", key, err)
	}
	if len(vs) == 0 || !vs[0].Latest || !vs[0].DeleteMarker {
		return refindex.QuarantinedObject{}, false, nil
	}
	// Every marker above the newest object version hides it; removing them all brings it back.
	var markers []string
	for _, v := range vs {
		if !v.DeleteMarker {
			loc := m.c.Location()
			full := loc.Prefix + key
			cmds := make([]string, len(markers))
			for i, id := range markers {
				cmds[i] = fmt.Sprintf("aws s3api delete-object --bucket %s --key %s --version-id %s", shellQuote(loc.Bucket), shellQuote(full), shellQuote(id))
			}
			return refindex.QuarantinedObject{Since: vs[0].ModTime, DeleteMarker: vs[0].VersionID, Restore: strings.Join(cmds, " && ")}, true, nil
		}
		markers = append(markers, v.VersionID)
	}
	return refindex.QuarantinedObject{}, false, nil // markers over nothing: the object's versions are gone
}

// shellQuote quotes s for a POSIX shell when it holds anything but safe characters.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:@+", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
