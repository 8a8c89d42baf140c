package hdfsclient

import (
	"context"
	"fmt"
)

// Room is the space writes below a directory may still take, in file bytes (what a file's length
// counts; HDFS's quotas and the cluster's capacity count raw, replicated bytes, divided here by the
// directory's replication): the tighter of the cluster's free space (getFsStats) and the directory's
// own space quota (getContentSummary). A quota set on a parent of the directory is not seen (reading
// one costs the NameNode a walk of the whole parent).
type Room struct {
	Size, Free int64
	// Quota: the directory's space quota is the tighter bound (Size is the quota).
	Quota bool
	// Replication is the raw bytes per file byte used: the directory's (space consumed over length),
	// or dfs.replication while it holds no data.
	Replication float64
}

// Spacer is implemented by the FSs that can tell a directory's Room (the real client and the fake).
type Spacer interface {
	Space(ctx context.Context, dir string) (Room, error)
}

var _ Spacer = (*Client)(nil)

// Space is dir's Room. Its getContentSummary walks dir on the NameNode (as a sync's listing does).
func (c *Client) Space(ctx context.Context, dir string) (Room, error) {
	if err := ctx.Err(); err != nil {
		return Room{}, wrap("getContentSummary", dir, err)
	}
	d, err := c.Defaults(ctx)
	if err != nil {
		return Room{}, err
	}
	g, err := c.acquire("getContentSummary", dir)
	if err != nil {
		return Room{}, err
	}
	defer g.release()
	cs, err := g.c.GetContentSummary(dir)
	if err != nil {
		return Room{}, wrap("getContentSummary", dir, err)
	}
	st, err := g.c.StatFs()
	if err != nil {
		return Room{}, wrap("getFsStats", "/", err)
	}
	return RoomOf(RawSpace{Capacity: int64(st.Capacity), Remaining: int64(st.Remaining), Length: cs.Size(),
		Consumed: cs.SizeAfterReplication(), SpaceQuota: cs.SpaceQuota(), DefaultReplication: d.Replication})
}

// RawSpace is what the NameNode reports, in raw bytes, for RoomOf.
type RawSpace struct {
	Capacity, Remaining int64 // the cluster's (getFsStats)
	Length, Consumed    int64 // the directory's file bytes and raw bytes (getContentSummary)
	SpaceQuota          int64 // the directory's space quota in raw bytes; <= 0: none
	DefaultReplication  int
}

// RoomOf turns what the NameNode reports into a Room.
func RoomOf(r RawSpace) (Room, error) {
	if r.Capacity <= 0 {
		return Room{}, fmt.Errorf("getFsStats: the NameNode reports a capacity of %d bytes (no live DataNodes?)", r.Capacity)
	}
	repl := float64(r.DefaultReplication)
	if r.Length > 0 && r.Consumed > 0 {
		repl = float64(r.Consumed) / float64(r.Length)
	}
	if repl < 1 {
		// Erasure coding stores less than 3x, never less than the data itself; an unknown factor
		// counts as 1 (the free space is then not overstated by more than the real factor).
		repl = 1
	}
	logical := func(raw int64) int64 { return int64(float64(max(raw, 0)) / repl) }
	out := Room{Size: logical(r.Capacity), Free: logical(r.Remaining), Replication: repl}
	if r.SpaceQuota > 0 {
		if qFree := logical(r.SpaceQuota - r.Consumed); qFree < out.Free {
			out = Room{Size: logical(r.SpaceQuota), Free: qFree, Quota: true, Replication: repl}
		}
	}
	return out, nil
}
