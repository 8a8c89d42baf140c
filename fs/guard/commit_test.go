package guard

import (
	"syscall"
	"testing"

	"github.com/ckguard/ckguard/refindex/verdict"
)

func TestIsMetadataCommit(t *testing.T) {
	flink := RenameFacts{SameDir: true, OldName: "._metadata.inprogress.6f1c2a9e-0b1d-4c3e-9a7f-1d2e3f4a5b6c", NewName: "_metadata", Regular: true, Nlink: 1}
	tests := []struct {
		name string
		edit func(*RenameFacts)
		want bool
	}{
		{"flink recoverable writer commit", func(*RenameFacts) {}, true},
		{"other folder", func(r *RenameFacts) { r.SameDir = false }, false},
		{"exchange", func(r *RenameFacts) { r.Exchange = true }, false},
		{"target not _metadata", func(r *RenameFacts) { r.NewName = "_metadata.bak" }, false},
		{"source any state file", func(r *RenameFacts) { r.OldName = "inflight-state-2" }, false},
		{"source a checkpoint folder", func(r *RenameFacts) { r.OldName = "chk-78"; r.Regular = false }, false},
		{"source _metadata_temp", func(r *RenameFacts) { r.OldName = "._metadata_temp" }, false},
		{"source bare prefix", func(r *RenameFacts) { r.OldName = MetadataInProgressPrefix }, false},
		{"source a directory", func(r *RenameFacts) { r.Regular = false }, false},
		{"source hard-linked", func(r *RenameFacts) { r.Nlink = 2 }, false},
		{"source nlink unknown", func(r *RenameFacts) { r.Nlink = 0 }, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := flink
			tc.edit(&r)
			if got := IsMetadataCommit(r); got != tc.want {
				t.Fatalf("IsMetadataCommit(%+v) = %v, want %v", r, got, tc.want)
			}
		})
	}
}

func TestOpenOp(t *testing.T) {
	for _, tc := range []struct {
		flags uint32
		want  verdict.Op
	}{
		{syscall.O_WRONLY, verdict.OpWrite},
		{syscall.O_RDWR | syscall.O_APPEND, verdict.OpWrite},
		{syscall.O_WRONLY | syscall.O_TRUNC, verdict.OpTruncate},
		{syscall.O_RDONLY | syscall.O_TRUNC, verdict.OpTruncate},
	} {
		if got := OpenOp(tc.flags); got != tc.want {
			t.Errorf("OpenOp(%#o) = %v, want %v", tc.flags, got, tc.want)
		}
	}
}
