package backends

import "testing"

// TestFor: every spelling of a --store value reaches its backend (the s3/s3a/s3p/s3n schemes one S3
// backend, hdfs: in its three forms and viewfs:// the HDFS one, anything else a local directory), and
// the --quarantine default is for the stores where staging is a rename and nothing else keeps
// deletions; S3 and HDFS mounts stage only when asked.
func TestFor(t *testing.T) {
	for _, tc := range []struct {
		store, name string
		stages      bool
	}{
		{"/srv/flink/checkpoints", "local", true},
		{"relative/dir", "local", true},
		{"s3://bucket/flink", "s3", false},
		{"s3a://bucket/flink", "s3", false},
		{"s3p://bucket/flink", "s3", false},
		{"s3n://bucket/flink", "s3", false},
		{"hdfs://namenode:8020/flink/checkpoints", "hdfs", false},
		{"hdfs:///flink/checkpoints", "hdfs", false},
		{"HDFS://namenode/flink", "hdfs", false},
		{"viewfs://cluster/flink", "hdfs", false},
		{"s3-bucket/flink", "local", true},
	} {
		b := For(tc.store)
		if b.Name() != tc.name || b.StagesDeletions() != tc.stages || b.Remote() != (tc.name != "local") {
			t.Errorf("For(%q) = %s (stages %v, remote %v), want %s (stages %v)", tc.store, b.Name(), b.StagesDeletions(), b.Remote(), tc.name, tc.stages)
		}
	}
}

// TestIdentityAndKeys: an S3 store is one store whatever scheme spells it, and a URI under it maps to
// its key under any of them; a URI elsewhere, and any URI under another backend's store, is no key.
func TestIdentityAndKeys(t *testing.T) {
	id := For("s3://bucket/flink/").Identity("s3://bucket/flink/")
	for _, s := range []string{"s3a://bucket/flink", "s3p://bucket/flink/"} {
		if got := For(s).Identity(s); !got.Same(id) {
			t.Errorf("identity of %s %+v, want the same as s3://bucket/flink/ %+v", s, got, id)
		}
	}
	if got := For("s3://bucket/other").Identity("s3://bucket/other"); got.Same(id) {
		t.Errorf("s3://bucket/other has the identity of s3://bucket/flink: %+v", got)
	}
	for _, tc := range []struct {
		store, uri, key string
		ok              bool
	}{
		{"s3://bucket/flink", "s3a://bucket/flink/job/chk-1/_metadata", "job/chk-1/_metadata", true},
		{"s3a://bucket/flink/", "s3://bucket/flink/job/x", "job/x", true},
		{"s3://bucket/flink", "s3://bucket/other/x", "", false},
		{"/srv/flink", "s3://bucket/flink/x", "", false},
		{"hdfs://nn:8020/flink", "hdfs://nn:8020/flink/x", "", false},
	} {
		if k, ok := For(tc.store).KeyOfURI(tc.store, tc.uri); k != tc.key || ok != tc.ok {
			t.Errorf("KeyOfURI(%s, %s) = %q %v, want %q %v", tc.store, tc.uri, k, ok, tc.key, tc.ok)
		}
	}
}
