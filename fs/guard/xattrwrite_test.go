package guard

import (
	"syscall"
	"testing"
)

func TestXattrWriteErrno(t *testing.T) {
	for _, tc := range []struct {
		attr string
		want syscall.Errno
	}{
		{XattrState, syscall.EPERM},
		{XattrRefs, syscall.EPERM},
		{"user.ckguard.other", syscall.EPERM},
		{"user.comment", syscall.ENOTSUP},
		{"security.selinux", syscall.ENOTSUP},
	} {
		t.Run(tc.attr, func(t *testing.T) {
			if got := XattrWriteErrno(tc.attr); got != tc.want {
				t.Errorf("XattrWriteErrno(%q) = %v, want %v", tc.attr, got, tc.want)
			}
		})
	}
}
