package s3client

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// sdkListDecoderEnv, set to 1, makes listings use the SDK's XML decoding instead of decodeListV2 (for
// comparisons; both give the same pages).
const sdkListDecoderEnv = "CKGUARD_S3_SDK_DECODER"

func sdkListDecoderFromEnv() bool { return os.Getenv(sdkListDecoderEnv) == "1" }

// leanList is the deserialize middleware that decodes a successful ListObjectsV2 response with
// decodeListV2. It sits right after the SDK's own deserializer (nearer the transport): on a 2xx response
// it reads and decodes the body and hands the SDK's deserializer an empty body, which it decodes as an
// empty output; every other response (errors, throttling, redirects) passes through untouched, so error
// codes, retries and the raw response in the metadata are the SDK's.
type leanList struct {
	res *listResult
	ok  *bool // set only when res holds the page of the attempt that succeeded
}

func (*leanList) ID() string { return "ckguardLeanListDecoder" }

func (m *leanList) HandleDeserialize(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (
	middleware.DeserializeOutput, middleware.Metadata, error) {
	*m.ok = false // a retry must never see the page of an earlier attempt
	out, md, err := next.HandleDeserialize(ctx, in)
	if err != nil {
		return out, md, err
	}
	resp, isHTTP := out.RawResponse.(*smithyhttp.Response)
	if !isHTTP || resp.StatusCode < 200 || resp.StatusCode >= 300 {
		return out, md, nil
	}
	buf := listBufs.Get().(*bytes.Buffer)
	defer putListBuf(buf)
	buf.Reset()
	body := resp.Body
	_, rerr := buf.ReadFrom(io.LimitReader(body, listBodyMax+1))
	body.Close()
	resp.Body = http.NoBody
	if rerr != nil {
		return out, md, &smithy.DeserializationError{Err: fmt.Errorf("read the listing: %w", rerr)}
	}
	if buf.Len() > listBodyMax {
		return out, md, &smithy.DeserializationError{Err: fmt.Errorf("listing response larger than %d bytes", listBodyMax)}
	}
	res, derr := decodeListV2(buf.Bytes())
	if derr != nil {
		snap := buf.Bytes()[:min(buf.Len(), 1024)]
		return out, md, &smithy.DeserializationError{Err: fmt.Errorf("decode the listing: %w", derr), Snapshot: bytes.Clone(snap)}
	}
	*m.res, *m.ok = res, true
	return out, md, nil
}

var listBufs = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// putListBuf keeps buffers of ordinary pages for reuse, not the rare huge one.
func putListBuf(b *bytes.Buffer) {
	if b.Cap() <= 4<<20 {
		listBufs.Put(b)
	}
}

// withLeanList adds m to one ListObjectsV2 call.
func withLeanList(m *leanList) func(*s3.Options) {
	return func(o *s3.Options) {
		o.APIOptions = append(o.APIOptions, func(st *middleware.Stack) error {
			return st.Deserialize.Insert(m, "OperationDeserializer", middleware.After)
		})
	}
}
