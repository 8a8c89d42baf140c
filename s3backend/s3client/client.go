package s3client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// Client talks to one bucket under one key prefix. All keys passed in and out are relative to the prefix
// ('/'-separated, no leading slash). It is safe for concurrent use.
type Client struct {
	api *s3.Client
	loc Location
	cfg Config
	// sdkList makes listings use the SDK's XML decoding (CKGUARD_S3_SDK_DECODER=1) instead of the lean
	// decoder (listxml.go).
	sdkList bool
}

// Object is one listed or HEADed object (or, with IsDir, one common prefix).
type Object struct {
	Key     string // relative; for IsDir it ends without '/'
	Size    int64
	ModTime time.Time
	ETag    string // without quotes
	IsDir   bool
	// VersionID is the version HeadObject answered on a versioned bucket ("" elsewhere, and in listings).
	VersionID string
}

// Location returns the bucket and prefix.
func (c *Client) Location() Location { return c.loc }

// MaxConns is the bound on parallel connections to the server (Config.MaxConns): more requests in
// flight than this only wait for a connection.
func (c *Client) MaxConns() int { return c.cfg.MaxConns }

// API exposes the SDK client for callers that need a request this package does not wrap (tests).
func (c *Client) API() *s3.Client { return c.api }

func (c *Client) full(rel string) string { return c.loc.Prefix + strings.TrimPrefix(rel, "/") }
func (c *Client) url(rel string) string  { return "s3://" + c.loc.Bucket + "/" + c.full(rel) }

func (c *Client) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, c.cfg.OpTimeout)
}

func unquote(etag *string) string { return strings.Trim(aws.ToString(etag), `"`) }
func quote(etag string) *string {
	if etag == "" {
		return nil
	}
	return aws.String(`"` + etag + `"`)
}

// Check verifies the bucket is reachable with the configured credentials.
func (c *Client) Check(ctx context.Context) error {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	_, err := c.api.HeadBucket(ctx, &s3.HeadBucketInput{Bucket: &c.loc.Bucket}, attempts(ctx))
	return wrap("HeadBucket", "s3://"+c.loc.Bucket, err)
}

// Head returns an object's size, mtime and ETag.
func (c *Client) Head(ctx context.Context, rel string) (Object, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel))}, attempts(ctx))
	if err != nil {
		return Object{}, wrap("HeadObject", c.url(rel), err)
	}
	return Object{Key: rel, Size: aws.ToInt64(out.ContentLength), ModTime: aws.ToTime(out.LastModified), ETag: unquote(out.ETag),
		VersionID: aws.ToString(out.VersionId)}, nil
}

// ReadAt fills p from the object at off with one ranged GET. Like io.ReaderAt it returns io.EOF when fewer
// than len(p) bytes remain. ifMatch, when set, fails with ErrPrecondition if the object was replaced.
func (c *Client) ReadAt(ctx context.Context, rel string, p []byte, off int64, ifMatch string) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.GetObject(ctx, &s3.GetObjectInput{
		Bucket:  &c.loc.Bucket,
		Key:     aws.String(c.full(rel)),
		Range:   aws.String(fmt.Sprintf("bytes=%d-%d", off, off+int64(len(p))-1)),
		IfMatch: quote(ifMatch),
	}, attempts(ctx))
	if err != nil {
		var apiErr interface{ ErrorCode() string }
		if errors.As(err, &apiErr) && apiErr.ErrorCode() == "InvalidRange" {
			return 0, io.EOF // off at or past the end
		}
		return 0, wrap("GetObject", c.url(rel), err)
	}
	defer out.Body.Close()
	n, err := io.ReadFull(out.Body, p)
	if err == io.ErrUnexpectedEOF || err == io.EOF {
		return n, io.EOF
	}
	if err != nil {
		return n, wrap("GetObject", c.url(rel), err)
	}
	return n, nil
}

// Page is one ListObjectsV2 page.
type Page struct {
	Objects  []Object // files (and "dir/" markers, with Key ending in '/')
	Prefixes []string // common prefixes, relative, without the trailing '/'
	Next     string   // continuation token, "" when this was the last page
	// Started is when the request was sent (before any retry): the page may describe the bucket as it was
	// at any moment since, so caches stamp its entries with it (AttrCache.PutAt).
	Started time.Time
}

// ListPage returns one page of keys under relPrefix (which should end in '/' unless it is ""). With delim,
// keys below the next '/' are folded into Prefixes. token continues a previous page; startAfter (relative)
// skips keys up to and including it on the first page.
func (c *Client) ListPage(ctx context.Context, relPrefix string, delim bool, token, startAfter string, maxKeys int32) (Page, error) {
	started := time.Now()
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	in := &s3.ListObjectsV2Input{Bucket: &c.loc.Bucket, Prefix: aws.String(c.full(relPrefix))}
	if delim {
		in.Delimiter = aws.String("/")
	}
	if token != "" {
		in.ContinuationToken = aws.String(token)
	} else if startAfter != "" {
		in.StartAfter = aws.String(c.full(startAfter))
	}
	if maxKeys > 0 {
		in.MaxKeys = aws.Int32(maxKeys)
	}
	// XML 1.0 cannot carry every byte a key may hold (control characters, invalid UTF-8): asked for
	// URL-encoded keys, the server sends them exactly; page decodes them, and refuses a page from a
	// server that ignored the request and sent a key it could only have garbled.
	in.EncodingType = types.EncodingTypeUrl
	res, err := c.listObjects(ctx, in)
	if err != nil {
		return Page{}, wrap("ListObjectsV2", c.url(relPrefix), err)
	}
	return c.page(res, relPrefix, started)
}

// listObjects sends one ListObjectsV2 request and decodes its answer, with the lean decoder unless
// the client was told to use the SDK's.
func (c *Client) listObjects(ctx context.Context, in *s3.ListObjectsV2Input) (listResult, error) {
	if c.sdkList {
		out, err := c.api.ListObjectsV2(ctx, in, attempts(ctx))
		if err != nil {
			return listResult{}, err
		}
		return fromSDK(out), nil
	}
	var res listResult
	var ok bool
	if _, err := c.api.ListObjectsV2(ctx, in, withLeanList(&leanList{res: &res, ok: &ok}), attempts(ctx)); err != nil {
		return listResult{}, err
	}
	if !ok {
		// Fail closed: a success the decoder did not see would be an empty page.
		return listResult{}, errors.New("the listing's answer was not decoded")
	}
	return res, nil
}

// fromSDK is the SDK's decoding of a page in the lean decoder's form.
func fromSDK(out *s3.ListObjectsV2Output) listResult {
	res := listResult{Truncated: aws.ToBool(out.IsTruncated), Next: aws.ToString(out.NextContinuationToken), URLEncoded: out.EncodingType == types.EncodingTypeUrl}
	for _, o := range out.Contents {
		res.Objects = append(res.Objects, Object{Key: aws.ToString(o.Key), Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified), ETag: unquote(o.ETag)})
	}
	for _, p := range out.CommonPrefixes {
		res.Prefixes = append(res.Prefixes, aws.ToString(p.Prefix))
	}
	return res
}

// page makes a decoded listing of relPrefix relative to the location. Keys are reused in place (the
// relative key is a substring of the full one). A key outside the requested prefix is an error: the
// server answered another question.
func (c *Client) page(res listResult, relPrefix string, started time.Time) (Page, error) {
	if err := exactKeys(&res); err != nil {
		return Page{}, wrap("ListObjectsV2", c.url(relPrefix), err)
	}
	pg := Page{Started: started, Objects: res.Objects[:0]}
	pl := len(c.loc.Prefix)
	want := c.full(relPrefix)
	for _, o := range res.Objects {
		if !strings.HasPrefix(o.Key, want) {
			return Page{}, wrap("ListObjectsV2", c.url(relPrefix), fmt.Errorf("the server listed %q, which is not under the prefix %q", o.Key, want))
		}
		o.Key = o.Key[pl:]
		pg.Objects = append(pg.Objects, o)
	}
	if len(pg.Objects) == 0 {
		pg.Objects = nil
	}
	for _, k := range res.Prefixes {
		if !strings.HasPrefix(k, want) {
			return Page{}, wrap("ListObjectsV2", c.url(relPrefix), fmt.Errorf("the server listed the common prefix %q, which is not under the prefix %q", k, want))
		}
		if len(k) <= pl {
			continue
		}
		pg.Prefixes = append(pg.Prefixes, strings.TrimSuffix(k[pl:], "/"))
	}
	if res.Truncated {
		pg.Next = res.Next
		if pg.Next == "" {
			return pg, wrap("ListObjectsV2", c.url(relPrefix), errors.New("truncated listing without a continuation token"))
		}
	}
	return pg, nil
}

// exactKeys makes res's keys and prefixes the exact bytes of the objects' keys: URL-decoded when the
// server encoded them; otherwise (a server that ignores encoding-type=url) a key holding U+FFFD is
// refused, since it may stand for bytes XML cannot carry (a control character, invalid UTF-8) that the
// server replaced: the key listed would not be the object's, and a decision on it would be about
// another name (a `_metadata` under it would look vanished, its checkpoint unseen).
func exactKeys(res *listResult) error {
	fix := func(k string) (string, error) {
		if res.URLEncoded {
			d, err := url.QueryUnescape(k)
			if err != nil {
				return "", fmt.Errorf("the server listed the URL-encoded key %q, which does not decode: %w", k, err)
			}
			return d, nil
		}
		if strings.ContainsRune(k, utf8.RuneError) {
			return "", fmt.Errorf("the server listed the key %q with a replacement character (U+FFFD) and ignores encoding-type=url, so the key's real bytes are unknown (a control character or invalid UTF-8 the server cannot list); rename that object with a client of the server's own API, or use a server that URL-encodes listings", k)
		}
		return k, nil
	}
	var err error
	for i := range res.Objects {
		if res.Objects[i].Key, err = fix(res.Objects[i].Key); err != nil {
			return err
		}
	}
	for i := range res.Prefixes {
		if res.Prefixes[i], err = fix(res.Prefixes[i]); err != nil {
			return err
		}
	}
	return nil
}

// ServerTime reads the S3 service's clock: the Date header of a one-key listing of the prefix (a
// request every credential that can list the store may make). The header has whole seconds, so the
// reading is never ahead of the service's clock by more than the request's latency.
func (c *Client) ServerTime(ctx context.Context) (time.Time, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	out, err := c.api.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: &c.loc.Bucket, Prefix: aws.String(c.loc.Prefix), MaxKeys: aws.Int32(1)}, attempts(ctx))
	if err != nil {
		return time.Time{}, wrap("ListObjectsV2", c.url(""), err)
	}
	raw, ok := awsmiddleware.GetRawResponse(out.ResultMetadata).(*smithyhttp.Response)
	if !ok {
		return time.Time{}, fmt.Errorf("read the clock of %s: no HTTP response", c.url(""))
	}
	date := raw.Header.Get("Date")
	t, err := http.ParseTime(date)
	if err != nil {
		return time.Time{}, fmt.Errorf("read the clock of %s: Date header %q: %w", c.url(""), date, err)
	}
	return t, nil
}

// Walk calls fn for every object under relPrefix in key order, page by page (never the whole listing in
// memory). An error from fn stops the walk and is returned.
func (c *Client) Walk(ctx context.Context, relPrefix string, fn func(Object) error) error {
	return c.WalkPages(ctx, relPrefix, nil, fn)
}

// WalkPages is Walk, calling page (when not nil) after each listing page it fetched.
func (c *Client) WalkPages(ctx context.Context, relPrefix string, page func(), fn func(Object) error) error {
	token := ""
	for {
		pg, err := c.ListPage(ctx, relPrefix, false, token, "", 1000)
		if err != nil {
			return err
		}
		if page != nil {
			page()
		}
		for _, o := range pg.Objects {
			if err := fn(o); err != nil {
				return err
			}
		}
		if pg.Next == "" {
			return nil
		}
		token = pg.Next
	}
}

// PutOptions are the conditions of a write.
type PutOptions struct {
	IfNoneMatch bool   // create only: fail with ErrPrecondition if the key exists
	IfMatch     string // replace only this version
}

// Put uploads body (size bytes) in one request.
func (c *Client) Put(ctx context.Context, rel string, body io.ReadSeeker, size int64, o PutOptions) (string, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	in := &s3.PutObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)), Body: body, ContentLength: aws.Int64(size), IfMatch: quote(o.IfMatch)}
	if o.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := c.api.PutObject(ctx, in, attempts(ctx))
	if err != nil {
		return "", wrap("PutObject", c.url(rel), err)
	}
	return unquote(out.ETag), nil
}

// Upload writes size bytes of r to rel: one PutObject up to partSize, a multipart upload with up to
// `parallel` parts in flight above it. A failed multipart upload is aborted so no parts are left billed.
func (c *Client) Upload(ctx context.Context, rel string, r io.ReaderAt, size, partSize int64, parallel int, o PutOptions) (string, error) {
	if partSize < 5<<20 {
		partSize = 5 << 20 // S3 minimum part size
	}
	if size <= partSize {
		return c.Put(ctx, rel, io.NewSectionReader(r, 0, size), size, o)
	}
	if parallel < 1 {
		parallel = 1
	}
	key := c.full(rel)
	cctx, cancel := c.opCtx(ctx)
	mu, err := c.api.CreateMultipartUpload(cctx, &s3.CreateMultipartUploadInput{Bucket: &c.loc.Bucket, Key: &key}, attempts(cctx))
	cancel()
	if err != nil {
		return "", wrap("CreateMultipartUpload", c.url(rel), err)
	}
	abort := func() {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.OpTimeout)
		defer cancel()
		_, _ = c.api.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &c.loc.Bucket, Key: &key, UploadId: mu.UploadId}, attempts(actx))
	}
	nparts := int((size + partSize - 1) / partSize)
	parts := make([]types.CompletedPart, nparts)
	var (
		wg       sync.WaitGroup
		errOnce  sync.Once
		firstErr error
		sem      = make(chan struct{}, parallel)
	)
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	for i := 0; i < nparts; i++ {
		off := int64(i) * partSize
		n := min(partSize, size-off)
		sem <- struct{}{}
		if pctx.Err() != nil {
			<-sem
			break
		}
		wg.Add(1)
		go func(i int, off, n int64) {
			defer func() { <-sem; wg.Done() }()
			octx, cancel := c.opCtx(pctx)
			defer cancel()
			num := int32(i + 1)
			out, err := c.api.UploadPart(octx, &s3.UploadPartInput{Bucket: &c.loc.Bucket, Key: &key, UploadId: mu.UploadId,
				PartNumber: &num, Body: io.NewSectionReader(r, off, n), ContentLength: aws.Int64(n)}, attempts(octx))
			if err != nil {
				errOnce.Do(func() { firstErr = wrap("UploadPart", c.url(rel), err); pcancel() })
				return
			}
			parts[i] = types.CompletedPart{ETag: out.ETag, PartNumber: &num}
		}(i, off, n)
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = wrap("UploadPart", c.url(rel), ctx.Err())
	}
	if firstErr != nil {
		abort()
		return "", firstErr
	}
	cctx, cancel = c.opCtx(ctx)
	defer cancel()
	in := &s3.CompleteMultipartUploadInput{Bucket: &c.loc.Bucket, Key: &key, UploadId: mu.UploadId,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts}, IfMatch: quote(o.IfMatch)}
	if o.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := c.api.CompleteMultipartUpload(cctx, in, attempts(cctx))
	if err != nil {
		abort()
		return "", wrap("CompleteMultipartUpload", c.url(rel), err)
	}
	return unquote(out.ETag), nil
}

// Delete removes rel. With ifMatch set the delete is conditional on the ETag the caller's decision saw, so
// an object replaced in the meantime is not removed (ErrPrecondition). Deleting a missing key succeeds on S3;
// callers that need ENOENT check existence first.
func (c *Client) Delete(ctx context.Context, rel, ifMatch string) error {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	_, err := c.api.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(rel)), IfMatch: quote(ifMatch)}, attempts(ctx))
	return wrap("DeleteObject", c.url(rel), err)
}

// Copy copies src to dst on the server, conditional on src still having srcETag (when set) and on the
// destination conditions in o (create-only, or replace only the version the caller's decision saw).
func (c *Client) Copy(ctx context.Context, src, dst, srcETag string, o PutOptions) (string, error) {
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	in := &s3.CopyObjectInput{Bucket: &c.loc.Bucket, Key: aws.String(c.full(dst)),
		CopySource: aws.String(c.loc.Bucket + "/" + escapeCopySource(c.full(src))), CopySourceIfMatch: quote(srcETag),
		IfMatch: quote(o.IfMatch)}
	if o.IfNoneMatch {
		in.IfNoneMatch = aws.String("*")
	}
	out, err := c.api.CopyObject(ctx, in, attempts(ctx))
	if err != nil {
		return "", wrap("CopyObject", c.url(src)+" -> "+c.url(dst), err)
	}
	if out.CopyObjectResult == nil {
		return "", nil
	}
	return unquote(out.CopyObjectResult.ETag), nil
}

// escapeCopySource URL-encodes a key for x-amz-copy-source, keeping '/' readable.
func escapeCopySource(key string) string {
	var b strings.Builder
	for _, seg := range strings.SplitAfter(key, "/") {
		s := strings.TrimSuffix(seg, "/")
		b.WriteString(url.PathEscape(s))
		if len(s) != len(seg) {
			b.WriteByte('/')
		}
	}
	return b.String()
}
