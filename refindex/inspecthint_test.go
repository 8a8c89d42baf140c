package refindex

import "testing"

// TestInspectHint: the advice for an unparseable _metadata is a command the shell runs as pasted.
func TestInspectHint(t *testing.T) {
	for _, tc := range []struct{ root, key, want string }{
		{"/srv/flink", "job/chk-9/_metadata", "ckguard inspect /srv/flink/job/chk-9/_metadata"},
		{"/srv/my flink", "job/chk-9/_metadata", "ckguard inspect '/srv/my flink/job/chk-9/_metadata'"},
		{"/srv/flink", "it's/_metadata", `ckguard inspect '/srv/flink/it'\''s/_metadata'`},
		{"/srv/flink", "$(reboot)/_metadata", "ckguard inspect '/srv/flink/$(reboot)/_metadata'"},
		{"s3://bucket/ckpt", "job/chk-9/_metadata", "aws s3 cp s3://bucket/ckpt/job/chk-9/_metadata - | ckguard inspect --location s3://bucket/ckpt/job/chk-9/_metadata -"},
	} {
		if got := inspectHint(tc.root, tc.key); got != tc.want {
			t.Errorf("inspectHint(%q, %q) = %s, want %s", tc.root, tc.key, got, tc.want)
		}
	}
}
