package flinklayout

import (
	"strings"
	"testing"
)

func TestNames(t *testing.T) {
	for _, c := range []struct {
		name                    string
		checkpoint, jobEntry    bool
		savepoint, forstAttempt bool
		number                  int64
	}{
		{name: "chk-12", checkpoint: true, jobEntry: true, number: 12},
		{name: "chk-0", checkpoint: true, jobEntry: true, number: 0},
		{name: "chk-", number: -1},
		{name: "chk-x", number: -1},
		{name: "chk-+5", number: -1},
		{name: "chk--1", number: -1},
		{name: "chk-99999999999999999999", checkpoint: true, jobEntry: true, number: -1}, // chk-<digits>, past int64
		{name: "shared", jobEntry: true, number: -1},
		{name: "taskowned", jobEntry: true, number: -1},
		{name: "Shared", number: -1},
		{name: "savepoint-6c7901-0123abcd", savepoint: true, number: -1},
		{name: "op_6c79_attempt_0", forstAttempt: true, number: -1},
		{name: "op__attempt_0", number: -1},
		{name: "op_6c79_attempt_x", number: -1},
	} {
		if got := IsCheckpointDir(c.name); got != c.checkpoint {
			t.Errorf("IsCheckpointDir(%q) = %v", c.name, got)
		}
		if got := IsJobFolderEntry(c.name); got != c.jobEntry {
			t.Errorf("IsJobFolderEntry(%q) = %v", c.name, got)
		}
		if got := IsSavepointDir(c.name); got != c.savepoint {
			t.Errorf("IsSavepointDir(%q) = %v", c.name, got)
		}
		if got := IsForStAttemptDir(c.name); got != c.forstAttempt {
			t.Errorf("IsForStAttemptDir(%q) = %v", c.name, got)
		}
		n, ok := CheckpointNumber(c.name)
		if ok != (c.number >= 0) || ok && n != c.number {
			t.Errorf("CheckpointNumber(%q) = %d, %v; want %d", c.name, n, ok, c.number)
		}
	}
}

func TestIsMetadata(t *testing.T) {
	for key, want := range map[string]bool{
		"_metadata":                      true,
		"job/chk-3/_metadata":            true,
		"sp/savepoint-1/_metadata":       true,
		"job/chk-3/_metadata/":           false, // an S3 folder marker
		"job/chk-3/_metadata.inprogress": false,
		"job/chk-3/x_metadata":           false,
		"":                               false,
	} {
		if got := IsMetadata(key); got != want {
			t.Errorf("IsMetadata(%q) = %v, want %v", key, got, want)
		}
	}
}

func TestCleanupOrder(t *testing.T) {
	tests := []struct{ in, want string }{
		{". .. shared chk-9 taskowned chk-10 _metadata chk-100 zzz", ". .. _metadata chk-100 chk-10 chk-9 shared taskowned zzz"},
		{"b a c", "b a c"}, // no checkpoint names: the directory's own order, untouched
		{"chk-x chk-2 chk- chk-1 savepoint-1 _metadata", "_metadata chk-2 chk-1 chk- chk-x savepoint-1"},
		{"", ""},
	}
	for _, tc := range tests {
		got := CleanupOrder(strings.Fields(tc.in), func(s string) string { return s })
		if g := strings.Join(got, " "); g != tc.want {
			t.Errorf("CleanupOrder(%q) = %q, want %q", tc.in, g, tc.want)
		}
	}
}
