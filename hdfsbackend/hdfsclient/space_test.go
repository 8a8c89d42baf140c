package hdfsclient_test

import (
	"testing"

	"github.com/ckguard/ckguard/hdfsbackend/hdfsclient"
)

// TestRoomOf: the store's room is the tighter of the cluster's and its own space quota, in file bytes
// (raw bytes over the folder's replication, dfs.replication while it holds nothing); a quota already
// overrun leaves no room; a cluster without capacity is an error, never "plenty of room".
func TestRoomOf(t *testing.T) {
	const gib = int64(1) << 30
	for _, tc := range []struct {
		name string
		in   hdfsclient.RawSpace
		want hdfsclient.Room
		err  bool
	}{
		{"cluster, replication 1", hdfsclient.RawSpace{Capacity: 100 * gib, Remaining: 40 * gib, Length: 10, Consumed: 10, DefaultReplication: 3},
			hdfsclient.Room{Size: 100 * gib, Free: 40 * gib, Replication: 1}, false},
		{"cluster, replication 3 from the folder", hdfsclient.RawSpace{Capacity: 300 * gib, Remaining: 30 * gib, Length: gib, Consumed: 3 * gib, DefaultReplication: 1},
			hdfsclient.Room{Size: 100 * gib, Free: 10 * gib, Replication: 3}, false},
		{"empty folder: dfs.replication", hdfsclient.RawSpace{Capacity: 300 * gib, Remaining: 30 * gib, DefaultReplication: 3},
			hdfsclient.Room{Size: 100 * gib, Free: 10 * gib, Replication: 3}, false},
		{"unknown replication counts as 1", hdfsclient.RawSpace{Capacity: 10 * gib, Remaining: 5 * gib},
			hdfsclient.Room{Size: 10 * gib, Free: 5 * gib, Replication: 1}, false},
		{"quota tighter", hdfsclient.RawSpace{Capacity: 300 * gib, Remaining: 200 * gib, Length: gib, Consumed: 3 * gib, SpaceQuota: 6 * gib, DefaultReplication: 3},
			hdfsclient.Room{Size: 2 * gib, Free: gib, Quota: true, Replication: 3}, false},
		{"quota looser than the cluster", hdfsclient.RawSpace{Capacity: 10 * gib, Remaining: gib, Length: gib, Consumed: gib, SpaceQuota: 100 * gib},
			hdfsclient.Room{Size: 10 * gib, Free: gib, Replication: 1}, false},
		{"quota overrun", hdfsclient.RawSpace{Capacity: 10 * gib, Remaining: 5 * gib, Length: 2 * gib, Consumed: 2 * gib, SpaceQuota: gib},
			hdfsclient.Room{Size: gib, Free: 0, Quota: true, Replication: 1}, false},
		{"no capacity", hdfsclient.RawSpace{Capacity: 0, Remaining: 0, SpaceQuota: gib}, hdfsclient.Room{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := hdfsclient.RoomOf(tc.in)
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("RoomOf(%+v) = %+v, %v; want %+v (error %v)", tc.in, got, err, tc.want, tc.err)
			}
		})
	}
}
