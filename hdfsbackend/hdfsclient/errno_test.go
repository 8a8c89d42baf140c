package hdfsclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"syscall"
	"testing"
)

// javaErr is what the library returns for a remote exception.
type javaErr string

func (e javaErr) Error() string     { return "call failed (" + string(e) + ")" }
func (e javaErr) Exception() string { return string(e) }

func TestErrno(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"nil", nil, 0},
		{"not found", &os.PathError{Op: "stat", Path: "/x", Err: os.ErrNotExist}, syscall.ENOENT},
		{"remote not found", javaErr("java.io.FileNotFoundException"), syscall.ENOENT},
		{"denied", &os.PathError{Op: "remove", Path: "/x", Err: os.ErrPermission}, syscall.EACCES},
		{"exists", javaErr("org.apache.hadoop.fs.FileAlreadyExistsException"), syscall.EEXIST},
		{"not empty", &os.PathError{Op: "remove", Path: "/x", Err: syscall.ENOTEMPTY}, syscall.ENOTEMPTY},
		{"parent file", javaErr("org.apache.hadoop.fs.ParentNotDirectoryException"), syscall.ENOTDIR},
		{"quota", javaErr("org.apache.hadoop.hdfs.protocol.NSQuotaExceededException"), syscall.EDQUOT},
		{"safe mode", &os.PathError{Op: "remove", Path: "/x", Err: javaErr("org.apache.hadoop.hdfs.server.namenode.SafeModeException")}, syscall.EIO},
		{"standby", javaErr("org.apache.hadoop.ipc.StandbyException"), syscall.EIO},
		{"lease", javaErr("org.apache.hadoop.hdfs.server.namenode.LeaseExpiredException"), syscall.EIO},
		{"unknown remote", javaErr("org.apache.hadoop.ipc.RemoteException"), syscall.EIO},
		{"refused", &net.OpError{Op: "dial", Err: syscall.ECONNREFUSED}, syscall.EIO},
		{"timeout", fmt.Errorf("read: %w", os.ErrDeadlineExceeded), syscall.EIO},
		{"canceled", context.Canceled, syscall.EINTR},
		{"other", errors.New("unexpected EOF"), syscall.EIO},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := Errno(wrap("op", "/x", tc.err)); got != tc.want {
				t.Errorf("Errno = %v, want %v", got, tc.want)
			}
		})
	}
	if !errors.Is(wrap("stat", "/x", &os.PathError{Err: os.ErrNotExist}), fs.ErrNotExist) {
		t.Error("a wrapped not-found is not fs.ErrNotExist")
	}
	if errors.Is(wrap("stat", "/x", javaErr("org.apache.hadoop.ipc.StandbyException")), fs.ErrNotExist) {
		t.Error("standby reads as not found")
	}
	if !Unavailable(wrap("delete", "/x", javaErr("org.apache.hadoop.hdfs.server.namenode.SafeModeException"))) {
		t.Error("safe mode is not Unavailable")
	}
}
