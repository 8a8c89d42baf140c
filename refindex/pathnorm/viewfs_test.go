package pathnorm

import "testing"

// TestViewFSAliases: viewfs:// references normalize to the store key of the hdfs:// directory their
// mount table maps them to, through the store's root aliases (hdfsclient computes which viewfs URIs name
// the store root); a viewfs reference under another cluster, another path, or a cluster spelled in
// another case (another mount table) stays outside the store.
func TestViewFSAliases(t *testing.T) {
	n, err := New(Config{StoreRoot: "hdfs://ns1/flink/checkpoints", RootAliases: []string{
		"viewfs://prod/flink/checkpoints", "viewfs:///flink/checkpoints", "viewfs://Mixed/ck",
	}})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		in     string
		want   string
		inside bool
	}{
		{"hdfs://ns1/flink/checkpoints/j/shared/a", "j/shared/a", true},
		{"viewfs://prod/flink/checkpoints/j/shared/a", "j/shared/a", true},
		{"VIEWFS://prod/flink//checkpoints/j/./shared/a/", "j/shared/a", true},
		{"viewfs:///flink/checkpoints/j/shared/a", "j/shared/a", true},
		{"viewfs:/flink/checkpoints/j/shared/a", "j/shared/a", true},
		{"viewfs://Mixed/ck/j/a", "j/a", true},
		{"viewfs://mixed/ck/j/a", "viewfs://mixed/ck/j/a", false},
		{"viewfs://other/flink/checkpoints/j/a", "viewfs://other/flink/checkpoints/j/a", false},
		{"viewfs://prod/flink/other/j/a", "viewfs://prod/flink/other/j/a", false},
		{"viewfs://prod/flink/checkpoints/../x", "viewfs://prod/flink/x", false},
	}
	for _, tc := range tests {
		k := n.Absolute(tc.in)
		if k.Path != tc.want || k.Inside != tc.inside {
			t.Errorf("Absolute(%q) = %+v, want {%q %v}", tc.in, k, tc.want, tc.inside)
		}
	}
}
