package s3quarantine_test

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/s3backend/s3client"
	"github.com/ckguard/ckguard/s3backend/s3quarantine"
	"github.com/ckguard/ckguard/s3backend/s3test/s3server"
)

func newVersionedClient(t *testing.T) *s3client.Client {
	srv := s3server.StartVersioned(t)
	srv.VersionedBucket(t, "vbkt")
	c, err := s3client.New(context.Background(), srv.Config(), s3client.Location{Bucket: "vbkt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func versions(t *testing.T, c *s3client.Client, key string) []s3client.Version {
	t.Helper()
	vs, err := c.Versions(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return vs
}

// areaObjects lists every version of every object under the quarantine prefix (records included).
func areaObjects(t *testing.T, c *s3client.Client) []string {
	t.Helper()
	var keys []string
	if err := c.Walk(context.Background(), s3quarantine.Prefix, func(o s3client.Object) error {
		keys = append(keys, o.Key)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestVersionedOpen: Open picks the delete-marker quarantine exactly on a bucket with versioning enabled.
func TestVersionedOpen(t *testing.T) {
	ctx := context.Background()
	srv := s3server.StartVersioned(t)
	for _, tc := range []struct {
		bucket    string
		versioned bool
	}{{srv.VersionedBucket(t, "vbon"), true}, {srv.Bucket(t, "vboff"), false}} {
		c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: tc.bucket})
		if err != nil {
			t.Fatal(err)
		}
		a, info, err := s3quarantine.Open(ctx, c, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, isV := a.(*s3quarantine.VersionedArea)
		if info.Versioned != tc.versioned || isV != tc.versioned || info.VersioningErr != nil {
			t.Errorf("bucket %s: Open chose versioned=%v (%T, err %v), want %v", tc.bucket, info.Versioned, a, info.VersioningErr, tc.versioned)
		}
	}
}

// TestVersionedStageRestorePurge: staging adds a delete marker and copies nothing; list shows the hidden
// version; restore removes the marker so the same version (bytes, ETag, version id) is current again;
// purge deletes the hidden version and its marker for good, and no record is left behind.
func TestVersionedStageRestorePurge(t *testing.T) {
	ctx := context.Background()
	c := newVersionedClient(t)
	a := s3quarantine.NewVersioned(c, func() time.Time { return time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC) })
	key := "job/shared/sst-1"
	etag := put(t, c, key, "state bytes")
	before, err := c.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if before.VersionID == "" {
		t.Fatalf("HEAD on a versioned bucket answered no version id")
	}
	e, err := a.Stage(ctx, key, etag, quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, c, key); ok {
		t.Fatalf("%s still readable after staging", key)
	}
	vs := versions(t, c, key)
	if len(vs) != 2 || !vs[0].DeleteMarker || !vs[0].Latest || vs[1].VersionID != before.VersionID {
		t.Fatalf("versions after staging: %+v, want a delete marker over version %s", vs, before.VersionID)
	}
	if got := areaObjects(t, c); len(got) != 1 || got[0] != s3quarantine.Prefix+e.ID+".json" {
		t.Fatalf("area holds %v, want only the entry record (nothing copied)", got)
	}
	es, probs, err := a.ListAll(ctx)
	if err != nil || len(probs) != 0 || len(es) != 1 || es[0].Path != key || es[0].Size != int64(len("state bytes")) || es[0].ETag != etag || es[0].VersionID != before.VersionID {
		t.Fatalf("list: %+v %+v %v", es, probs, err)
	}
	if f, ok, err := quarantine.Find(ctx, a, key); err != nil || !ok || f.ID != e.ID {
		t.Fatalf("find %s: %+v %v %v", key, f, ok, err)
	}

	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	after, err := c.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := get(t, c, key); body != "state bytes" || after.ETag != before.ETag || after.VersionID != before.VersionID || after.Size != before.Size {
		t.Fatalf("restored %q %+v, want the version %+v", body, after, before)
	}
	if vs := versions(t, c, key); len(vs) != 1 {
		t.Fatalf("versions after restore: %+v, want the one version", vs)
	}
	if got := areaObjects(t, c); len(got) != 0 {
		t.Fatalf("area after restore holds %v", got)
	}
	if vs := versions(t, c, s3quarantine.Prefix+e.ID+".json"); len(vs) != 0 {
		t.Fatalf("the record left versions behind: %+v", vs)
	}

	e2, err := a.Stage(ctx, key, "", quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Purge(ctx, e2.ID); err != nil {
		t.Fatal(err)
	}
	if vs := versions(t, c, key); len(vs) != 0 {
		t.Fatalf("versions after purge: %+v, want none (version and marker gone)", vs)
	}
	if es, err := a.List(ctx); err != nil || len(es) != 0 {
		t.Fatalf("list after purge: %+v %v", es, err)
	}
	if _, err := a.Restore(ctx, e2.ID); !errors.Is(err, quarantine.ErrNoEntry) {
		t.Fatalf("restore of a purged entry: %v, want ErrNoEntry", err)
	}
}

// TestVersionedRestoreNeverReplaces: an object written at the key after the staging stays current, and the
// entry stays; a purge then deletes only the entry's version and keeps the new object.
func TestVersionedRestoreNeverReplaces(t *testing.T) {
	ctx := context.Background()
	c := newVersionedClient(t)
	a := s3quarantine.NewVersioned(c, nil)
	key := "job/chk-1/_metadata"
	etag := put(t, c, key, "old")
	e, err := a.Stage(ctx, key, etag, quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	put(t, c, key, "new")
	if _, err := a.Restore(ctx, e.ID); !errors.Is(err, quarantine.ErrOccupied) {
		t.Fatalf("restore over a new object: %v, want ErrOccupied", err)
	}
	if body, _ := get(t, c, key); body != "new" {
		t.Fatalf("key holds %q after the refused restore, want the new object", body)
	}
	if es, _ := a.List(ctx); len(es) != 1 {
		t.Fatalf("entry gone after a refused restore: %+v", es)
	}
	if err := a.Purge(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	if body, _ := get(t, c, key); body != "new" {
		t.Fatalf("key holds %q after purge, want the new object", body)
	}
	if vs := versions(t, c, key); len(vs) != 1 || vs[0].DeleteMarker {
		t.Fatalf("versions after purge: %+v, want only the new object", vs)
	}
}

// TestVersionedStageChanged: an object replaced since the decision is not deleted and leaves no entry.
func TestVersionedStageChanged(t *testing.T) {
	ctx := context.Background()
	c := newVersionedClient(t)
	a := s3quarantine.NewVersioned(c, nil)
	key := "job/shared/sst-2"
	old := put(t, c, key, "v1")
	put(t, c, key, "v2")
	if _, err := a.Stage(ctx, key, old, quarantine.Decision{}); !errors.Is(err, s3client.ErrPrecondition) {
		t.Fatalf("stage of a replaced object: %v, want ErrPrecondition", err)
	}
	if body, _ := get(t, c, key); body != "v2" {
		t.Fatalf("key holds %q, want v2 untouched", body)
	}
	if got := areaObjects(t, c); len(got) != 0 {
		t.Fatalf("area holds %v after a refused staging", got)
	}
}

// faultyClient fails one step of a staging, as a crash there would leave it.
type faultyClient struct {
	*s3client.Client
	failDelete bool // the delete (marker) never happens
	failSecond bool // the record rewrite after the delete fails
	recordPuts int
}

var errCrash = errors.New("crash")

func (f *faultyClient) DeleteMarking(ctx context.Context, key, ifMatch string) (string, error) {
	if f.failDelete {
		return "", errCrash
	}
	return f.Client.DeleteMarking(ctx, key, ifMatch)
}

func (f *faultyClient) Put(ctx context.Context, key string, body io.ReadSeeker, size int64, o s3client.PutOptions) (string, error) {
	if strings.HasPrefix(key, s3quarantine.Prefix) {
		f.recordPuts++
		if f.failSecond && f.recordPuts == 2 {
			return "", errCrash
		}
	}
	return f.Client.Put(ctx, key, body, size, o)
}

// TestVersionedStageCrash: a staging stopped before its delete leaves the object current and no entry (and
// Unstage drops the pending record); one stopped after the delete but before the record names the marker
// is still an entry, restorable.
func TestVersionedStageCrash(t *testing.T) {
	ctx := context.Background()
	c := newVersionedClient(t)
	for _, tc := range []struct {
		name  string
		fc    *faultyClient
		entry bool
	}{
		{"before the delete", &faultyClient{Client: c, failDelete: true}, false},
		{"after the delete", &faultyClient{Client: c, failSecond: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "job/shared/crash-" + strings.ReplaceAll(tc.name, " ", "-")
			etag := put(t, c, key, "bytes of "+tc.name)
			_, err := s3quarantine.NewVersioned(tc.fc, nil).Stage(ctx, key, etag, quarantine.Decision{})
			if tc.entry != (err == nil) {
				t.Fatalf("stage: %v", err)
			}
			a := s3quarantine.NewVersioned(c, nil)
			es, probs, err := a.ListAll(ctx)
			if err != nil || len(probs) != 0 {
				t.Fatalf("list: %v %+v", err, probs)
			}
			var found *quarantine.Entry
			for i := range es {
				if es[i].Path == key {
					found = &es[i]
				}
			}
			_, atKey := get(t, c, key)
			if atKey == tc.entry || (found != nil) != tc.entry {
				t.Fatalf("object at its key %v, entry %v; want exactly one of them (entry: %v)", atKey, found, tc.entry)
			}
			if !tc.entry {
				if err := a.Unstage(ctx, key, etag); err != nil {
					t.Fatal(err)
				}
				for _, k := range areaObjects(t, c) {
					if k == s3quarantine.Prefix+s3quarantine.VersionedID(key, etag, "")+".json" {
						t.Fatalf("pending record %s kept", k)
					}
				}
				return
			}
			if _, err := a.Restore(ctx, found.ID); err != nil {
				t.Fatal(err)
			}
			if body, _ := get(t, c, key); body != "bytes of "+tc.name {
				t.Fatalf("restored %q", body)
			}
		})
	}
}

// TestMarkerFinder: a delete marker made outside ckguard over an object version is found with the
// command that removes it; a key never deleted, or whose versions are all gone, is not.
func TestMarkerFinder(t *testing.T) {
	ctx := context.Background()
	c := newVersionedClient(t)
	f := s3quarantine.NewMarkerFinder(c)
	put(t, c, "job/shared/a", "a")
	put(t, c, "job/shared/b", "b")
	marker, err := c.DeleteMarking(ctx, "job/shared/a", "")
	if err != nil || marker == "" {
		t.Fatalf("delete: marker %q, %v", marker, err)
	}
	for _, tc := range []struct {
		key   string
		found bool
	}{{"job/shared/a", true}, {"job/shared/b", false}, {"job/shared/never", false}} {
		q, ok, err := f.FindQuarantined(ctx, tc.key)
		if err != nil || ok != tc.found {
			t.Fatalf("%s: found %v (%+v), %v; want %v", tc.key, ok, q, err, tc.found)
		}
		if ok && (q.DeleteMarker != marker || q.Restore != "aws s3api delete-object --bucket vbkt --key flink/job/shared/a --version-id "+marker) {
			t.Fatalf("%s: %+v", tc.key, q)
		}
	}
	vs := versions(t, c, "job/shared/a")
	for _, v := range vs {
		if !v.DeleteMarker {
			if err := c.DeleteVersion(ctx, "job/shared/a", v.VersionID); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok, err := f.FindQuarantined(ctx, "job/shared/a"); err != nil || ok {
		t.Fatalf("a marker over nothing reported as restorable: %v %v", ok, err)
	}
}

// TestVersionedRestoreKeepsLastModified (MinIO, which keeps a version's time as AWS does): an object
// restored from the delete-marker quarantine is the same version with the same Last-Modified.
func TestVersionedRestoreKeepsLastModified(t *testing.T) {
	ctx := context.Background()
	srv := s3server.StartMinIO(t)
	admin, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "vbkt"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.API().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String("vbkt")}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.API().PutBucketVersioning(ctx, &s3.PutBucketVersioningInput{Bucket: aws.String("vbkt"),
		VersioningConfiguration: &types.VersioningConfiguration{Status: types.BucketVersioningStatusEnabled}}); err != nil {
		t.Fatal(err)
	}
	c, err := s3client.New(ctx, srv.Config(), s3client.Location{Bucket: "vbkt", Prefix: "flink/"})
	if err != nil {
		t.Fatal(err)
	}
	a, info, err := s3quarantine.Open(ctx, c, nil)
	if err != nil || !info.Versioned {
		t.Fatalf("Open on a versioned MinIO bucket: %+v %v", info, err)
	}
	for _, key := range []string{"job/shared/sst", "job/ctl\x01/sst"} {
		restoreKeepsLastModified(t, c, a, key)
	}
}

// restoreKeepsLastModified stages key (a control character in it needs the URL-encoded version
// listing: XML 1.0 cannot carry it), restores it, stages and purges it again.
func restoreKeepsLastModified(t *testing.T, c *s3client.Client, a s3quarantine.Stager, key string) {
	t.Helper()
	ctx := context.Background()
	etag := put(t, c, key, "state")
	before, err := c.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(1100 * time.Millisecond) // Last-Modified has whole seconds: a reset would show
	e, err := a.Stage(ctx, key, etag, quarantine.Decision{Op: "unlink", Reason: "allowed"})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := get(t, c, key); ok {
		t.Fatalf("%s readable after staging", key)
	}
	if _, err := a.Restore(ctx, e.ID); err != nil {
		t.Fatal(err)
	}
	after, err := c.Head(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if body, _ := get(t, c, key); body != "state" || after.VersionID != before.VersionID || after.ETag != before.ETag || !after.ModTime.Equal(before.ModTime) {
		t.Fatalf("restored %q %+v, want the version %+v with its Last-Modified", body, after, before)
	}
	e2, err := a.Stage(ctx, key, "", quarantine.Decision{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Purge(ctx, e2.ID); err != nil {
		t.Fatal(err)
	}
	if vs := versions(t, c, key); len(vs) != 0 {
		t.Fatalf("versions after purge: %+v", vs)
	}
}
