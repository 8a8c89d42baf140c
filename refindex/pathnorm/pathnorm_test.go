package pathnorm

import (
	"strings"
	"testing"
)

func TestAbsolute(t *testing.T) {
	local, err := New(Config{StoreRoot: "/srv/flink", Maps: []Mapping{
		{From: "file:/flink/ckpt", To: ""},
		{From: "hdfs://nn:8020/flink", To: "hdfs"},
		{From: "hdfs:///flink", To: "hdfs"},
		{From: "s3://bucket/flink", To: "s3"},
		{From: "s3://bucket/flink/special", To: "elsewhere/sp"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	s3store, err := New(Config{StoreRoot: "s3://ckpt-bucket/prod", EntropyKey: "_entropy_", Maps: []Mapping{
		{From: "s3://ckpt-bucket/prod/_entropy_/flink", To: "_entropy_/flink"},
		{From: "s3://other/_entropy_/cp", To: "cp"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	bare, err := New(Config{StoreRoot: "s3://b"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		n      *Normalizer
		in     string
		want   string
		inside bool
	}{
		{"own dir file:", local, "file:/srv/flink/job/shared/a", "job/shared/a", true},
		{"own dir file:///", local, "file:///srv/flink/job/shared/a", "job/shared/a", true},
		{"own dir localhost", local, "file://localhost/srv/flink/job/shared/a", "job/shared/a", true},
		{"own dir scheme-less", local, "/srv/flink/job/shared/a", "job/shared/a", true},
		{"duplicate and trailing slashes", local, "file:/srv//flink///job/shared/a/", "job/shared/a", true},
		{"dot segments", local, "file:/srv/flink/./job/x/../shared/a", "job/shared/a", true},
		{"dotdot leaves the store", local, "file:/srv/flink/../etc/passwd", "file:/srv/etc/passwd", false},
		{"dotdot at root clamps", local, "file:/../../srv/flink/a", "a", true},
		{"sibling prefix is not inside", local, "file:/srv/flinkother/a", "file:/srv/flinkother/a", false},
		{"exact root", local, "file:/srv/flink", "", true},
		{"map file:", local, "file:/flink/ckpt/job/chk-1/x", "job/chk-1/x", true},
		{"map hdfs with authority", local, "hdfs://nn:8020/flink/job/shared/s", "hdfs/job/shared/s", true},
		{"map hdfs without authority", local, "hdfs:///flink/job/shared/s", "hdfs/job/shared/s", true},
		{"hdfs other namenode is outside", local, "hdfs://nn2:8020/flink/job/shared/s", "hdfs://nn2:8020/flink/job/shared/s", false},
		{"s3a alias of mapped s3", local, "s3a://bucket/flink/j/shared/s", "s3/j/shared/s", true},
		{"s3p alias of mapped s3", local, "s3p://bucket/flink/j/shared/s", "s3/j/shared/s", true},
		{"S3A upper-case scheme", local, "S3A://bucket/flink/j/shared/s", "s3/j/shared/s", true},
		{"longest prefix wins", local, "s3://bucket/flink/special/x", "elsewhere/sp/x", true},
		{"outside s3 canonical", local, "s3a://other//k//x/", "s3://other/k/x", false},
		{"outside gs", local, "gs://b/k", "gs://b/k", false},
		{"s3 store root", s3store, "s3a://ckpt-bucket/prod/job/chk-1/f", "job/chk-1/f", true},
		{"s3 store root s3p", s3store, "s3p://ckpt-bucket/prod/job/shared/f", "job/shared/f", true},
		{"entropy data file keeps random segment", s3store, "s3://ckpt-bucket/prod/gf36/flink/job/shared/f", "gf36/flink/job/shared/f", true},
		{"entropy removed (metadata path)", s3store, "s3://ckpt-bucket/prod/flink/job/chk-3/_metadata", "flink/job/chk-3/_metadata", true},
		{"entropy template without key in target", s3store, "s3a://other/Xy9z/cp/job/shared/f", "cp/job/shared/f", true},
		{"entropy template, key removed", s3store, "s3a://other/cp/job/chk-1/_metadata", "cp/job/chk-1/_metadata", true},
		{"relative name stays outside", local, "job/x", "job/x", false},
		{"windows drive is not a scheme", local, "C:/x", "C:/x", false},
		// A doubled slash right after the authority or at the start of the path is no empty first
		// segment: a key beginning with "/" would match no object.
		{"double slash after the bucket", s3store, "s3://ckpt-bucket//prod/job/shared/f", "job/shared/f", true},
		{"double slash at the start of a local path", local, "file:////srv/flink/job/x", "job/x", true},
		{"double slash after the store root bucket", bare, "s3a://b//x/y", "x/y", true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.n.Absolute(tc.in)
			if got.Path != tc.want || got.Inside != tc.inside {
				t.Errorf("Absolute(%q) = %+v, want {%q %v}", tc.in, got, tc.want, tc.inside)
			}
		})
	}
}

func TestRelative(t *testing.T) {
	n, _ := New(Config{StoreRoot: "/s"})
	tests := []struct {
		meta, name, want string
		inside           bool
	}{
		{"sp/savepoint-1/_metadata", "abc", "sp/savepoint-1/abc", true},
		{"_metadata", "abc", "abc", true},
		{"a/chk-1/_metadata", "../chk-0/x", "a/chk-0/x", true},
		{"a/chk-1/_metadata", "../../../etc/passwd", "relative:a/chk-1/../../../etc/passwd", false},
		{"a/chk-1/_metadata", "./x//y", "a/chk-1/x/y", true},
		{"_metadata", "/x", "x", true}, // was "/x" (an empty first segment)
	}
	for _, tc := range tests {
		got := n.Relative(tc.meta, tc.name)
		if got.Path != tc.want || got.Inside != tc.inside {
			t.Errorf("Relative(%q,%q) = %+v, want %q %v", tc.meta, tc.name, got, tc.want, tc.inside)
		}
	}
}

func TestNewErrors(t *testing.T) {
	for _, m := range []Mapping{
		{From: "relative/path", To: ""},
		{From: "s3://b/x", To: "s3://b/y"},
		{From: "s3://b/x", To: "../up"},
	} {
		if _, err := New(Config{StoreRoot: "/s", Maps: []Mapping{m}}); err == nil {
			t.Errorf("New accepted %+v", m)
		}
	}
	if _, err := New(Config{Maps: []Mapping{{From: "s3://b/x", To: "a"}, {From: "s3a://b/x/", To: "b"}}}); err == nil {
		t.Errorf("conflicting aliases accepted")
	}
	if _, err := ParseMapping("nomap"); err == nil {
		t.Errorf("ParseMapping accepted a value without '='")
	}
	m, err := ParseMapping("hdfs://nn:8020/a=b=c")
	if err != nil || m.From != "hdfs://nn:8020/a=b" || m.To != "c" {
		t.Errorf("ParseMapping = %+v %v", m, err)
	}
}

func TestFingerprint(t *testing.T) {
	a, _ := New(Config{StoreRoot: "/s"})
	b, _ := New(Config{StoreRoot: "/s", Maps: []Mapping{{From: "file:/x", To: ""}}})
	c, _ := New(Config{StoreRoot: "/s", EntropyKey: "_e_"})
	if a.Fingerprint() == b.Fingerprint() || a.Fingerprint() == c.Fingerprint() {
		t.Errorf("fingerprints do not tell configurations apart")
	}
	a2, _ := New(Config{StoreRoot: "/s"})
	if a.Fingerprint() != a2.Fingerprint() {
		t.Errorf("fingerprint not deterministic")
	}
}

func TestJobFolder(t *testing.T) {
	n, _ := New(Config{StoreRoot: "s3://b", EntropyKey: "_entropy_"})
	known := map[string]bool{"flink/jobA": true, "ckpt/jobB": true}
	k := func(s string) bool { return known[s] }
	tests := []struct{ key, want string }{
		{"flink/jobA/shared/x", "flink/jobA"},
		{"flink/jobA/chk-12/x", "flink/jobA"},
		{"ab12/flink/jobA/shared/x", "flink/jobA"},
		{"ckpt/jobB/taskowned/x", "ckpt/jobB"},
		{"random/file", ""},
		{"flink/jobA/chk-x/y", ""},
		{"jobC/shared/f", "jobC"},
	}
	for _, tc := range tests {
		if got := n.JobFolder(tc.key, k); got != tc.want {
			t.Errorf("JobFolder(%q) = %q, want %q", tc.key, got, tc.want)
		}
	}
}

// TestFastPathAgrees: the allocation-free fast path answers exactly like the general one.
func TestFastPathAgrees(t *testing.T) {
	norms := []*Normalizer{}
	for _, cfg := range []Config{
		{StoreRoot: "/srv/flink", Maps: []Mapping{{From: "file:/flink/ckpt", To: ""}, {From: "hdfs://nn:8020/flink", To: "hdfs"}, {From: "s3://bucket/flink", To: "s3"}, {From: "s3://bucket/flink/special", To: "elsewhere/sp"}}},
		{StoreRoot: "s3://ckpt-bucket/prod", EntropyKey: "_entropy_", Maps: []Mapping{{From: "s3://ckpt-bucket/prod/_entropy_/flink", To: "_entropy_/flink"}}},
		{StoreRoot: "s3://b"},
	} {
		n, err := New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		norms = append(norms, n)
	}
	schemes := []string{"file:", "file://", "file:///", "s3://", "s3a://", "s3p://", "S3://", "hdfs://", "gs://", "/", ""}
	auths := []string{"", "bucket", "ckpt-bucket", "b", "nn:8020", "localhost"}
	paths := []string{"/srv/flink/j/shared/x", "/srv/flink", "/srv/flinkx/a", "/flink/ckpt/j/chk-1/f", "/flink/j/x", "/flink/special/y",
		"/prod/ab12/flink/j/x", "/prod/flink/j/chk-1/_metadata", "/prod/j/x", "/k", "/a//b", "/a/./b", "/a/../b", "/a/b/", "/"}
	n := 0
	for _, nm := range norms {
		for _, sc := range schemes {
			for _, au := range auths {
				for _, p := range paths {
					var ref string
					switch {
					case strings.HasSuffix(sc, "://"):
						ref = sc + au + p
					default:
						ref = sc + p
					}
					if k, ok := nm.fastAbsolute(ref); ok {
						n++
						if want := nm.slowAbsolute(ref); k != want {
							t.Errorf("fast %q = %+v, general path %+v", ref, k, want)
						}
					}
				}
			}
		}
	}
	if n < 100 {
		t.Errorf("fast path taken only %d times", n)
	}
}
