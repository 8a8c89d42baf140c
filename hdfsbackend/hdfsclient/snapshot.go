package hdfsclient

import "context"

// Snapshots are the NameNode's snapshot calls (the library's allowSnapshot, createSnapshot and
// deleteSnapshot RPCs). They are not part of FS (the fake has no snapshots): *Client implements them, and
// hdfsbackend/hdfssnap asserts it. A snapshot of dir is read at dir/.snapshot/<name>/... with the
// ordinary calls (Stat, List, Open).
//
// Permissions: allowSnapshot needs the NameNode's superuser (the mount's user is usually not: an
// administrator runs `hdfs dfsadmin -allowSnapshot DIR` once); createSnapshot and deleteSnapshot need
// the owner of the snapshottable directory (or the superuser).
type Snapshots interface {
	AllowSnapshots(ctx context.Context, dir string) error
	CreateSnapshot(ctx context.Context, dir, name string) (path string, err error)
	DeleteSnapshot(ctx context.Context, dir, name string) error
}

var _ Snapshots = (*Client)(nil)

// SnapshotDir is where the snapshots of dir are read.
func SnapshotDir(dir string) string { return Join(dir, ".snapshot") }

func (c *Client) AllowSnapshots(ctx context.Context, dir string) error {
	g, err := c.begin(ctx, "allowSnapshot", dir)
	if err != nil {
		return err
	}
	defer g.release()
	return wrap("allowSnapshot", dir, withRemoteMessage(g.c.AllowSnapshots(dir)))
}

func (c *Client) CreateSnapshot(ctx context.Context, dir, name string) (string, error) {
	g, err := c.begin(ctx, "createSnapshot", dir)
	if err != nil {
		return "", err
	}
	defer g.release()
	p, err := g.c.CreateSnapshot(dir, name)
	return p, wrap("createSnapshot", dir+" "+name, withRemoteMessage(err))
}

func (c *Client) DeleteSnapshot(ctx context.Context, dir, name string) error {
	g, err := c.begin(ctx, "deleteSnapshot", dir)
	if err != nil {
		return err
	}
	defer g.release()
	return wrap("deleteSnapshot", dir+" "+name, withRemoteMessage(g.c.DeleteSnapshot(dir, name)))
}
