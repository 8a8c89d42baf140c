package pathnorm

import (
	"slices"
	"testing"
)

// TestRootAliasesAuthorities: a store given through a symlink or reached through a guard's
// mountpoint has several names; host authorities are case-insensitive; hdfs://nn means
// hdfs://nn:8020.
func TestRootAliasesAuthorities(t *testing.T) {
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

func TestCandidates(t *testing.T) {
	n, err := New(Config{StoreRoot: "/nfs/ckpt"})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		uri, meta string
		want      []string // Map of each candidate, in order
		suggest   string   // of the first
	}{
		// Own job folder: the part from the job folder on, below the folder holding it.
		{"file:/mnt/flink/j1/chk-7/f", "prod/j1/chk-7/_metadata", []string{"file:/mnt/flink/j1=prod/j1", "file:/mnt/flink=prod", "file:/mnt/flink=prod/j1/chk-7", "file:/mnt/flink=prod/j1", "file:/mnt/flink="}, "file:/mnt/flink=prod"},
		{"file:/mnt/prod/j1/chk-7/f", "prod/j1/chk-7/_metadata", []string{"file:/mnt/prod/j1=prod/j1", "file:/mnt/prod=prod", "file:/mnt=", "file:/mnt/prod=prod/j1/chk-7", "file:/mnt/prod=prod/j1", "file:/mnt/prod="}, "file:/mnt="},
		// Another job's shared files (restored from it): the folder holding the job folders first.
		{"hdfs://nn:8020/x/j0/shared/f", "j1/chk-7/_metadata", []string{"hdfs://nn:8020/x=", "hdfs://nn:8020/x=j1/chk-7", "hdfs://nn:8020/x=j1"}, "hdfs://nn:8020/x="},
		{"s3://b/sp/savepoint-ab12-cd/f", "sps/savepoint-ab12-cd/_metadata", []string{"s3://b/sp=sps"}, "s3://b/sp=sps"},
		{"s3://b/f", "j1/chk-7/_metadata", nil, ""}, // no layout: nowhere to look
	}
	for _, tc := range tests {
		var got []string
		cs := n.Candidates(tc.uri, tc.meta, nil)
		for _, c := range cs {
			got = append(got, c.Map())
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Candidates(%q, %q) = %q, want %q", tc.uri, tc.meta, got, tc.want)
		}
		if len(cs) > 0 && cs[0].Suggest() != tc.suggest {
			t.Errorf("Candidates(%q, %q)[0].Suggest() = %q, want %q", tc.uri, tc.meta, cs[0].Suggest(), tc.suggest)
		}
	}
}

func TestIsExternal(t *testing.T) {
	n, err := New(Config{StoreRoot: "s3://b/flink", External: []string{"s3a://other/sp", "hdfs://nn/savepoints"}})
	if err != nil {
		t.Fatal(err)
	}
	for uri, want := range map[string]bool{
		"s3://other/sp/savepoint-1/f": true, "s3p://other/sp/x": true, "s3://other/spx/f": false, "s3://b/flink/x": false,
		"hdfs://nn:8020/savepoints/a": true, "hdfs://nn2:8020/savepoints/a": false,
	} {
		if got := n.IsExternal(n.Absolute(uri).Path); got != want {
			t.Errorf("IsExternal(%q) = %v, want %v", uri, got, want)
		}
	}
	if _, err := New(Config{External: []string{"relative/x"}}); err == nil {
		t.Error("a relative external prefix accepted")
	}
}
