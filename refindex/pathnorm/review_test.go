package pathnorm

import "testing"

// Review C3: a store given through a symlink or reached through a guard's mountpoint has several
// names; host authorities are case-insensitive; hdfs://nn means hdfs://nn:8020.
func TestReviewC3RootAliasesAuthorities(t *testing.T) {
	n, err := New(Config{StoreRoot: "/nfs/ckpt", RootAliases: []string{"/flink/ckpt", "/mnt/guard", "/nfs/ckpt"},
		Maps: []Mapping{{From: "hdfs://NameNode.example/flink", To: "h"}, {From: "hdfs://nn2:9000/flink", To: "h2"}}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in, want string
		inside   bool
	}{
		{"file:/nfs/ckpt/j/shared/a", "j/shared/a", true},
		{"file:/flink/ckpt/j/shared/a", "j/shared/a", true},
		{"/mnt/guard/j/chk-1/x", "j/chk-1/x", true},
		{"file:///mnt/guard/j/chk-1/x", "j/chk-1/x", true},
		{"hdfs://namenode.example/flink/j/s", "h/j/s", true},
		{"hdfs://NAMENODE.EXAMPLE:8020/flink/j/s", "h/j/s", true},
		{"hdfs://namenode.example:8020/flink/j/s", "h/j/s", true},
		{"hdfs://namenode.example:9000/flink/j/s", "hdfs://namenode.example:9000/flink/j/s", false},
		{"hdfs://nn2:9000/flink/j/s", "h2/j/s", true},
		{"hdfs://nn2/flink/j/s", "hdfs://nn2:8020/flink/j/s", false},
		{"HDFS://NN2:9000/flink/j/s", "h2/j/s", true},
		{"s3://Bucket/x", "s3://Bucket/x", false}, // bucket names are not folded
	}
	for _, tc := range tests {
		k := n.Absolute(tc.in)
		if k.Path != tc.want || k.Inside != tc.inside {
			t.Errorf("Absolute(%q) = %+v, want %q inside=%v", tc.in, k, tc.want, tc.inside)
		}
		if s := n.slowAbsolute(tc.in); s != k {
			t.Errorf("fast and general path differ for %q: %+v vs %+v", tc.in, k, s)
		}
	}
	// A configured default port, and none at all.
	n9, err := New(Config{StoreRoot: "/s", DefaultPorts: map[string]int{"hdfs": 9000}, Maps: []Mapping{{From: "hdfs://nn/flink", To: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	if k := n9.Absolute("hdfs://nn:9000/flink/a"); !k.Inside || k.Path != "a" {
		t.Errorf("default port 9000: %+v", k)
	}
	if k := n9.Absolute("hdfs://nn:8020/flink/a"); k.Inside {
		t.Errorf("port 8020 is another namenode when the default is 9000: %+v", k)
	}
	none, err := New(Config{StoreRoot: "/s", DefaultPorts: map[string]int{}, Maps: []Mapping{{From: "hdfs://nn/flink", To: ""}}})
	if err != nil {
		t.Fatal(err)
	}
	if k := none.Absolute("hdfs://nn:8020/flink/a"); k.Inside {
		t.Errorf("no default ports: %+v", k)
	}
	if none.Fingerprint() == n9.Fingerprint() {
		t.Error("default ports do not change the fingerprint")
	}
}

func TestReviewC3Unmapped(t *testing.T) {
	n, err := New(Config{StoreRoot: "/nfs/ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uri, meta      string
		scope, suggest string
		ok             bool
	}{
		{"file:/mnt/flink/j1/chk-7/f", "prod/j1/chk-7/_metadata", "prod/j1", "file:/mnt/flink=prod", true},
		{"file:/mnt/prod/j1/chk-7/f", "prod/j1/chk-7/_metadata", "prod/j1", "file:/mnt=", true},
		{"hdfs://nn:8020/x/j1/chk-7/sub/f", "j1/chk-7/_metadata", "j1", "hdfs://nn:8020/x=", true},
		{"s3://b/sp/savepoint-ab12-cd/f", "sps/savepoint-ab12-cd/_metadata", "sps/savepoint-ab12-cd", "s3://b/sp=sps", true},
		{"file:/mnt/flink/j1/shared/f", "prod/j1/chk-7/_metadata", "", "", false},         // restored from elsewhere
		{"file:/mnt/flink/j1/chk-6/f", "prod/j1/chk-7/_metadata", "", "", false},          // another checkpoint's folder
		{"file:/mnt/flink/j2/chk-7/f", "prod/j1/chk-7/_metadata", "", "", false},          // another job
		{"file:/mnt/flink/j1/chk-7", "prod/j1/chk-7/_metadata", "", "", false},            // the folder itself, no file
		{"file:/mnt/flink/chk-7/f", "chk-7/_metadata", "chk-7", "file:/mnt/flink=", true}, // a chk folder at the root
	}
	for _, tc := range tests {
		scope, suggest, ok := n.Unmapped(tc.uri, tc.meta)
		if scope != tc.scope || suggest != tc.suggest || ok != tc.ok {
			t.Errorf("Unmapped(%q, %q) = %q, %q, %v; want %q, %q, %v", tc.uri, tc.meta, scope, suggest, ok, tc.scope, tc.suggest, tc.ok)
		}
	}
}
