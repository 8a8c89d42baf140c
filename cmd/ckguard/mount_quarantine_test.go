package main

import "testing"

// TestStoreStagesDeletions: the --quarantine default is for the stores where staging is a rename and
// nothing else keeps deletions; S3 and HDFS mounts stage only when asked.
func TestStoreStagesDeletions(t *testing.T) {
	for _, tc := range []struct {
		store string
		want  bool
	}{
		{"/srv/flink/checkpoints", true},
		{"relative/dir", true},
		{"s3://bucket/flink", false},
		{"hdfs://namenode:8020/flink/checkpoints", false},
		{"hdfs:///flink/checkpoints", false},
	} {
		if got := storeStagesDeletions(tc.store); got != tc.want {
			t.Errorf("storeStagesDeletions(%q) = %v, want %v", tc.store, got, tc.want)
		}
	}
}
