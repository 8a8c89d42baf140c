package s3client

import (
	"context"
	"net/url"
	"sort"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// Versioning states of a bucket (GetBucketVersioning). A bucket that never had versioning answers "".
const (
	VersioningEnabled   = "Enabled"
	VersioningSuspended = "Suspended"
)

// BucketVersioning returns the bucket's versioning status: VersioningEnabled, VersioningSuspended or ""
// (never enabled). On an enabled bucket a DeleteObject without a version id only adds a delete marker:
// the deleted version stays, hidden, until someone deletes it by its version id.
func (c *Client) BucketVersioning(ctx context.Context) (string, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.GetBucketVersioning(ctx, &s3.GetBucketVersioningInput{Bucket: &c.loc.Bucket}, attempts(ctx))
	if err != nil {
		return "", wrap("GetBucketVersioning", "s3://"+c.loc.Bucket, err)
	}
	return string(out.Status), nil
}

// Version is one version of a key on a versioned bucket: an object version or a delete marker.
type Version struct {
	Key          string // relative
	VersionID    string
	ETag         string // "" for a delete marker
	Size         int64
	ModTime      time.Time
	Latest       bool // the key's current version (a delete marker here: the key reads as absent)
	DeleteMarker bool
}

// Versions returns every version and delete marker of exactly rel (not of the keys rel is a prefix
// of), newest first.
func (c *Client) Versions(ctx context.Context, rel string) ([]Version, error) {
	full := c.full(rel)
	var vs []Version
	var keyMarker, idMarker *string
	for {
		octx, cancel := c.opCtx(ctx)
		// As ListPage: asked for URL-encoded keys, the server sends every key exactly (XML 1.0 cannot
		// carry control characters or invalid UTF-8); exactVersionKeys decodes them, and refuses an
		// answer from a server that ignored the request and sent a key it could only have garbled (a
		// version of rel would go unseen, or another key's be taken for rel's).
		out, err := c.api.ListObjectVersions(octx, &s3.ListObjectVersionsInput{Bucket: &c.loc.Bucket, Prefix: aws.String(full),
			KeyMarker: keyMarker, VersionIdMarker: idMarker, EncodingType: types.EncodingTypeUrl}, attempts(octx))
		cancel()
		if err != nil {
			return nil, wrap("ListObjectVersions", c.url(rel), err)
		}
		if err := exactVersionKeys(out); err != nil {
			return nil, wrap("ListObjectVersions", c.url(rel), err)
		}
		done := false
		for _, v := range out.Versions {
			if aws.ToString(v.Key) != full {
				done = done || aws.ToString(v.Key) > full
				continue
			}
			vs = append(vs, Version{Key: rel, VersionID: aws.ToString(v.VersionId), ETag: unquote(v.ETag), Size: aws.ToInt64(v.Size),
				ModTime: aws.ToTime(v.LastModified), Latest: aws.ToBool(v.IsLatest)})
		}
		for _, m := range out.DeleteMarkers {
			if aws.ToString(m.Key) != full {
				done = done || aws.ToString(m.Key) > full
				continue
			}
			vs = append(vs, Version{Key: rel, VersionID: aws.ToString(m.VersionId), ModTime: aws.ToTime(m.LastModified),
				Latest: aws.ToBool(m.IsLatest), DeleteMarker: true})
		}
		// Keys after rel in the listing (rel/..., relX) end the versions of rel: S3 lists key by key.
		if done || !aws.ToBool(out.IsTruncated) {
			break
		}
		keyMarker, idMarker = out.NextKeyMarker, out.NextVersionIdMarker
	}
	// S3 answers versions and delete markers in two lists; the latest goes first, then by time.
	sort.SliceStable(vs, func(i, j int) bool {
		if vs[i].Latest != vs[j].Latest {
			return vs[i].Latest
		}
		return vs[i].ModTime.After(vs[j].ModTime)
	})
	return vs, nil
}

// exactVersionKeys makes the keys of a ListObjectVersions answer (versions, delete markers, the next
// key marker) the exact bytes of the objects' keys, as exactKeys does for ListObjectsV2.
func exactVersionKeys(out *s3.ListObjectVersionsOutput) error {
	res := listResult{URLEncoded: out.EncodingType == types.EncodingTypeUrl}
	for _, v := range out.Versions {
		res.Objects = append(res.Objects, Object{Key: aws.ToString(v.Key)})
	}
	for _, m := range out.DeleteMarkers {
		res.Objects = append(res.Objects, Object{Key: aws.ToString(m.Key)})
	}
	if out.NextKeyMarker != nil {
		res.Prefixes = append(res.Prefixes, *out.NextKeyMarker)
	}
	if err := exactKeys(&res); err != nil {
		return err
	}
	for i := range out.Versions {
		out.Versions[i].Key = aws.String(res.Objects[i].Key)
	}
	for i := range out.DeleteMarkers {
		out.DeleteMarkers[i].Key = aws.String(res.Objects[len(out.Versions)+i].Key)
	}
	if out.NextKeyMarker != nil {
		out.NextKeyMarker = aws.String(res.Prefixes[0])
	}
	return nil
}

// DeleteMarking deletes rel on a versioned bucket without a version id: the server adds a delete marker
// (returned: its version id) and keeps the deleted version. ifMatch, when set, makes the delete
// conditional on the current version's ETag (ErrPrecondition otherwise).
func (c *Client) DeleteMarking(ctx context.Context, rel, ifMatch string) (marker string, err error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)), IfMatch: quote(ifMatch)}, attempts(ctx))
	if err != nil {
		return "", wrap("DeleteObject", c.url(rel), err)
	}
	if !aws.ToBool(out.DeleteMarker) {
		return "", nil
	}
	return aws.ToString(out.VersionId), nil
}

// DeleteVersion removes one version (or delete marker) of rel for good. Removing the delete marker
// that is a key's latest version makes the version below it current again, unchanged.
func (c *Client) DeleteVersion(ctx context.Context, rel, versionID string) error {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	_, err := c.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)), VersionId: aws.String(versionID)}, attempts(ctx))
	return wrap("DeleteObject", c.url(rel)+"?versionId="+versionID, err)
}

// CopyVersion copies one version of rel to rel itself (a new current version with its bytes), with the
// destination conditions in o (IfNoneMatch: only while nothing reads at rel, a delete marker counting
// as nothing). A single CopyObject: sources above 5 GiB are refused by the server.
func (c *Client) CopyVersion(ctx context.Context, rel, versionID string, o PutOptions) (string, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	in := &s3.CopyObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)),
		CopySource: aws.String(c.loc.Bucket + "/" + escapeCopySource(c.full(rel)) + "?versionId=" + url.QueryEscape(versionID)),
		IfMatch:    quote(o.IfMatch)}
	if o.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := c.api.CopyObject(ctx, in, attempts(ctx))
	if err != nil {
		return "", wrap("CopyObject", c.url(rel)+"?versionId="+versionID+" -> "+c.url(rel), err)
	}
	if out.CopyObjectResult == nil {
		return "", nil
	}
	return unquote(out.CopyObjectResult.ETag), nil
}
