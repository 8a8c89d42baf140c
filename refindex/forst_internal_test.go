package refindex

import (
	"slices"
	"testing"
)

// The layout matcher recognises ForSt working folders where Flink puts them (ForStStateBackend's
// base path: <checkpoint dir>/<job>/shared/op_<id>_attempt_<n>/db, or <primary>/<job id>/op_…/db) and
// nothing else: a RocksDB shared SST, a folder merely named like one outside shared/, a primary root
// whose next folder is no job id.
func TestMatchForst(t *testing.T) {
	const job = "6c79f1a2b3c4d5e6f708192a3b4c5d6e"
	s := newMemState()
	s.jobParents = map[string][]string{job: {"flink", "other"}}
	att := "op_KeyedProcessOperator_20ba__1_1__attempt_2"
	tests := []struct {
		name      string
		key       string
		primaries []string
		ok        bool
		attempt   string
		root      string
		jobs      []string
	}{
		{"default layout, a db file", "flink/" + job + "/shared/" + att + "/db/000012.sst", nil, true, "flink/" + job + "/shared/" + att, "flink/" + job + "/shared", []string{"flink/" + job}},
		{"default layout, the attempt folder", "flink/" + job + "/shared/" + att, nil, true, "flink/" + job + "/shared/" + att, "flink/" + job + "/shared", []string{"flink/" + job}},
		{"default layout, a job folder at the root", job + "/shared/" + att + "/db", nil, true, job + "/shared/" + att, job + "/shared", []string{job}},
		{"the shared folder itself", "flink/" + job + "/shared", nil, false, "", "", nil},
		{"a RocksDB shared SST", "flink/" + job + "/shared/8a0c1d2e-uuid", nil, false, "", "", nil},
		{"attempt-like name outside shared", "flink/" + job + "/chk-3/" + att + "/db/x", nil, false, "", "", nil},
		{"a shared folder at the root has no job", "shared/" + att + "/db/x", nil, false, "", "", nil},
		{"malformed attempt number", "flink/" + job + "/shared/op_x_attempt_/db/x", nil, false, "", "", nil},
		{"explicit primary", "forst/" + job + "/" + att + "/db/MANIFEST-000005", []string{"forst"}, true, "forst/" + job + "/" + att, "forst/" + job, []string{"flink/" + job, "other/" + job}},
		{"explicit primary at the store root", job + "/" + att + "/db/CURRENT", []string{""}, true, job + "/" + att, job, []string{"flink/" + job, "other/" + job}},
		{"explicit primary not configured", "forst/" + job + "/" + att + "/db/x", nil, false, "", "", nil},
		{"another primary", "forst/" + job + "/" + att + "/db/x", []string{"forst2"}, false, "", "", nil},
		{"primary: no job id", "forst/notajob/" + att + "/db/x", []string{"forst"}, false, "", "", nil},
		{"primary: the job folder only", "forst/" + job, []string{"forst"}, false, "", "", nil},
		{"primary: a job no checkpoint names", "forst/00000000000000000000000000000001/" + att + "/db/x", []string{"forst"}, true, "forst/00000000000000000000000000000001/" + att, "forst/00000000000000000000000000000001", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, ok := s.matchForst(tt.key, tt.primaries)
			if ok != tt.ok || d.Attempt != tt.attempt || d.Root != tt.root || !slices.Equal(d.Jobs, tt.jobs) {
				t.Errorf("matchForst(%q, %q) = %+v, %v; want attempt %q root %q jobs %q, %v", tt.key, tt.primaries, d, ok, tt.attempt, tt.root, tt.jobs, tt.ok)
			}
		})
	}
}
