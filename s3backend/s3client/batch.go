package s3client

import (
	"context"
	"errors"
	"fmt"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
)

// MaxBatch is the most keys one DeleteObjects request may carry (an S3 limit).
const MaxBatch = 1000

// DeleteItem is one key of a batch delete and the ETag it is conditional on ("" for none).
type DeleteItem struct {
	Key     string // relative
	IfMatch string
}

// BatchError is the answer of DeleteObjects for one key: the server refused or could not delete it while it
// deleted others. It is classified like every other S3 error (Unwrap).
type BatchError struct {
	Key     string // relative
	Code    string // the S3 error code, e.g. "PreconditionFailed", "InternalError"
	Message string
	class   error
}

func (e *BatchError) Error() string {
	return fmt.Sprintf("S3 DeleteObjects %s: %s: %s", e.Key, e.Code, e.Message)
}

func (e *BatchError) Unwrap() error { return e.class }

// DeleteBatch deletes up to MaxBatch keys with one DeleteObjects request, each conditional on its ETag when
// IfMatch is set (S3 and servers that honour per-object conditions refuse a replaced object with
// PreconditionFailed; see ProbeBatchIfMatch in s3mount). It returns the per-key outcome in the order of
// items: nil for a key the server confirms deleted, a *BatchError for a key it refused, ErrUnavailable for
// a key the answer does not mention (never assumed deleted). A failure of the whole request (after the
// bounded retries) is the error result; then nothing is known about any key.
func (c *Client) DeleteBatch(ctx context.Context, items []DeleteItem) ([]error, error) {
	if len(items) == 0 {
		return nil, nil
	}
	if len(items) > MaxBatch {
		return nil, fmt.Errorf("DeleteObjects: %d keys, at most %d per request", len(items), MaxBatch)
	}
	ctx, cancel := c.opCtx(ctx)
	defer cancel()
	objs := make([]types.ObjectIdentifier, len(items))
	index := make(map[string]int, len(items))
	for i, it := range items {
		full := c.full(it.Key)
		if _, dup := index[full]; dup {
			return nil, fmt.Errorf("DeleteObjects: key %s twice in one batch", c.url(it.Key))
		}
		index[full] = i
		objs[i] = types.ObjectIdentifier{Key: aws.String(full), ETag: quote(it.IfMatch)}
	}
	// Not quiet: every deleted key is confirmed by name, so a key the answer leaves out is not taken for
	// deleted.
	out, err := c.api.DeleteObjects(ctx, &s3.DeleteObjectsInput{Bucket: &c.loc.Bucket,
		Delete: &types.Delete{Objects: objs, Quiet: aws.Bool(false)}}, attempts(ctx))
	if err != nil {
		return nil, wrap("DeleteObjects", c.url(items[0].Key)+fmt.Sprintf(" (and %d more)", len(items)-1), err)
	}
	res := make([]error, len(items))
	known := make([]bool, len(items))
	for _, d := range out.Deleted {
		if i, ok := index[aws.ToString(d.Key)]; ok {
			known[i] = true
		}
	}
	for _, e := range out.Errors {
		i, ok := index[aws.ToString(e.Key)]
		if !ok {
			continue
		}
		known[i] = true
		be := &BatchError{Key: items[i].Key, Code: aws.ToString(e.Code), Message: aws.ToString(e.Message)}
		be.class = classify(&smithy.GenericAPIError{Code: be.Code, Message: be.Message})
		res[i] = be
	}
	for i := range res {
		if !known[i] {
			res[i] = &Error{Op: "DeleteObjects", Key: c.url(items[i].Key), Class: ErrUnavailable,
				Err: errors.New("the server's answer names neither a deletion nor an error for this key")}
		}
	}
	return res, nil
}
