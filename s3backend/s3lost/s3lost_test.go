package s3lost

import (
	"context"
	"errors"
	"io/fs"
	"testing"
	"time"

	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// fake is one key's versions (newest first) with injectable refusals.
type fake struct {
	vs          []s3client.Version
	denyMarkers bool
	deleted     []string
	copied      string
}

func (f *fake) Versions(context.Context, string) ([]s3client.Version, error) { return f.vs, nil }
func (f *fake) DeleteVersion(_ context.Context, _, id string) error {
	if f.denyMarkers {
		return fs.ErrPermission
	}
	f.deleted = append(f.deleted, id)
	for i, v := range f.vs {
		if v.VersionID == id {
			f.vs = append(f.vs[:i:i], f.vs[i+1:]...)
			break
		}
	}
	return nil
}
func (f *fake) CopyVersion(_ context.Context, key, id string, o s3client.PutOptions) (string, error) {
	if !o.IfNoneMatch {
		return "", errors.New("copy back without If-None-Match")
	}
	f.copied = id
	for _, v := range f.vs {
		if v.VersionID == id {
			f.vs = append([]s3client.Version{{Key: key, VersionID: "copy", Size: v.Size}}, f.vs...)
		}
	}
	return "", nil
}
func (f *fake) Head(context.Context, string) (s3client.Object, error) {
	if len(f.vs) == 0 || f.vs[0].DeleteMarker {
		return s3client.Object{}, fs.ErrNotExist
	}
	return s3client.Object{VersionID: f.vs[0].VersionID, Size: f.vs[0].Size}, nil
}
func (f *fake) Location() s3client.Location { return s3client.Location{Bucket: "b", Prefix: "p/"} }

func TestChooseAndRestore(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	dm := func(id string) s3client.Version {
		return s3client.Version{VersionID: id, DeleteMarker: true, ModTime: t0}
	}
	ov := func(id string) s3client.Version { return s3client.Version{VersionID: id, Size: 7, ModTime: t0} }
	cases := []struct {
		name        string
		vs          []s3client.Version
		staged      bool
		deny        bool
		restorable  bool
		present     bool
		version     string
		method      string
		wantDeleted int
	}{
		{name: "one marker", vs: []s3client.Version{dm("m1"), ov("v1")}, restorable: true, version: "v1", method: lostfound.MethodRemoveMarkers, wantDeleted: 1},
		{name: "two markers over two versions: the newest", vs: []s3client.Version{dm("m2"), dm("m1"), ov("v2"), ov("v1")}, restorable: true, version: "v2", method: lostfound.MethodRemoveMarkers, wantDeleted: 2},
		{name: "markers cannot be removed: copy back", vs: []s3client.Version{dm("m1"), ov("v1")}, deny: true, restorable: true, version: "v1", method: lostfound.MethodCopyVersion},
		{name: "present again", vs: []s3client.Version{ov("v3"), dm("m1"), ov("v1")}, present: true},
		{name: "only markers", vs: []s3client.Version{dm("m1")}},
		{name: "no versions", vs: nil},
		{name: "staged in quarantine", vs: []s3client.Version{dm("m1"), ov("v1")}, staged: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := &fake{vs: tc.vs, denyMarkers: tc.deny}
			s := New(f, map[string]bool{"k": tc.staged})
			c, err := s.Find(context.Background(), "k")
			if err != nil {
				t.Fatal(err)
			}
			if c.Restorable != tc.restorable || c.Present != tc.present || c.Version != tc.version {
				t.Fatalf("Find = %+v, want restorable %v present %v version %q", c, tc.restorable, tc.present, tc.version)
			}
			if !c.Restorable {
				if !tc.present && c.Reason == "" {
					t.Error("not restorable without a reason")
				}
				return
			}
			m, err := s.Restore(context.Background(), c)
			if err != nil {
				t.Fatal(err)
			}
			if m != tc.method || len(f.deleted) != tc.wantDeleted {
				t.Errorf("Restore = %s, %d markers removed; want %s, %d", m, len(f.deleted), tc.method, tc.wantDeleted)
			}
			if o, err := f.Head(context.Background(), "k"); err != nil || o.Size != 7 {
				t.Errorf("after the restore: %+v, %v", o, err)
			}
		})
	}
}

// TestRestoreNeverReplaces: a version written at the key between Find and Restore stays current.
func TestRestoreNeverReplaces(t *testing.T) {
	f := &fake{vs: []s3client.Version{{VersionID: "m1", DeleteMarker: true}, {VersionID: "v1", Size: 7}}}
	s := New(f, nil)
	c, err := s.Find(context.Background(), "k")
	if err != nil || !c.Restorable {
		t.Fatal(c, err)
	}
	f.vs = append([]s3client.Version{{VersionID: "v2", Size: 9}}, f.vs...)
	if _, err := s.Restore(context.Background(), c); err == nil {
		t.Fatal("restored over a version written meanwhile")
	}
	if len(f.deleted) != 0 || f.copied != "" || f.vs[0].VersionID != "v2" {
		t.Errorf("acted anyway: deleted %v, copied %q, current %s", f.deleted, f.copied, f.vs[0].VersionID)
	}
	// A newer object version hidden by a newer marker: the versions changed, nothing done.
	f.vs = append([]s3client.Version{{VersionID: "m2", DeleteMarker: true}}, f.vs...)
	if _, err := s.Restore(context.Background(), c); !errors.Is(err, ErrChanged) {
		t.Fatalf("Restore after the versions changed: %v, want ErrChanged", err)
	}
}
