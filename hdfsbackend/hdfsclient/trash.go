package hdfsclient

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"
	"time"
)

// TrashRoot is the directory a user's deletions are moved to, as the FS shell's `hdfs dfs -rm` does
// with fs.trash.interval > 0 (the trash emptier later checkpoints and expunges it).
func TrashRoot(user string) string { return "/user/" + user + "/.Trash" }

// MoveToTrash moves name (a file or an empty directory the caller has decided may go) to
// /user/<user>/.Trash/Current<name>, creating the parents there. A name already in that place of the
// trash is kept: the new one gets a ".<unix-millis>" suffix, so nothing in the trash is replaced. A name
// that is already inside the user's trash is deleted for good (as `hdfs dfs -rm` does). now stamps the
// suffix. It returns where the file went ("" when it was deleted).
func MoveToTrash(ctx context.Context, f FS, name string, now time.Time) (string, error) {
	root := TrashRoot(f.User())
	if name == root || strings.HasPrefix(name, root+"/") {
		return "", f.Remove(ctx, name)
	}
	dst := path.Join(root, "Current", name)
	if err := f.MkdirAll(ctx, path.Dir(dst), 0o700); err != nil {
		return "", fmt.Errorf("moving %s to the HDFS trash: %w", name, err)
	}
	for i := 0; ; i++ {
		target := dst
		if i > 0 {
			target = fmt.Sprintf("%s.%d", dst, now.UnixMilli()+int64(i-1))
		}
		err := f.Rename(ctx, name, target)
		if err == nil {
			return target, nil
		}
		if !errors.Is(err, fs.ErrExist) || i >= 8 {
			return "", fmt.Errorf("moving %s to the HDFS trash %s: %w", name, target, err)
		}
	}
}
