package errno

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"
)

func TestCommon(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"not exist", fmt.Errorf("stat x: %w", fs.ErrNotExist), syscall.ENOENT},
		{"permission", fs.ErrPermission, syscall.EACCES},
		{"canceled", fmt.Errorf("op: %w", context.Canceled), syscall.EINTR},
		{"raw errno", fmt.Errorf("op: %w", syscall.ENOTDIR), syscall.ENOTDIR},
		{"unknown", errors.New("boom"), syscall.EIO},
		{"deadline", context.DeadlineExceeded, syscall.EIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Common(tc.err); got != tc.want {
				t.Errorf("Common(%v) = %v, want %v", tc.err, got, tc.want)
			}
		})
	}
}
