package s3store

import (
	"context"
	"sort"

	"github.com/ckguard/ckguard/s3backend/s3client"
)

// A full walk of a big bucket is one ListObjectsV2 page (1,000 keys) after another, each waiting for the
// previous one's continuation token: at 20 ms per request and 20 ms of decoding per page, 1 M objects take
// 40 s, 100 M over an hour. parallelWalk lists disjoint parts of the key space at once:
//
//   - folders near the top (job folders and the folders above them, up to walkExpandDepth levels) are
//     listed with a delimiter, their objects reported and their sub-folders walked in parallel;
//   - checkpoint, savepoint, shared and taskowned folders, and folders below that depth, are walked flat;
//     when the first page of such a walk is not the last, the rest of its key space is cut at fixed
//     boundaries (the folder's prefix followed by each of splitChars) and the ranges walked in parallel.
//
// The ranges partition the keys: range i holds the keys k with b(i) < k <= b(i+1) (the first from the
// beginning, the last to the end), so every key is reported exactly once whatever characters the names
// use; the boundaries only decide how evenly the work is shared (Flink's SST names are UUIDs).
const walkExpandDepth = 6

// splitChars are the range boundaries of a big flat walk, in byte order.
const splitChars = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ_abcdefghijklmnopqrstuvwxyz"

// parallelWalk calls fn (concurrently, from several goroutines) for every object below prefix ("" or
// ending in '/'). An error from fn or S3 stops the walk and is returned.
func (s *Store) parallelWalk(ctx context.Context, prefix string, fn func(s3client.Object) error) error {
	g := newGroup(ctx, s.opts.Parallel)
	var expand func(prefix string, depth int)
	expand = func(prefix string, depth int) {
		g.Go(func(ctx context.Context) error {
			if !cleanPrefix(prefix) {
				return s.c.Walk(ctx, prefix, fn) // raw keys, one flat walk
			}
			var children []string
			token := ""
			for {
				pg, err := s.c.ListPage(ctx, prefix, true, token, "", 1000)
				if err != nil {
					return err
				}
				for _, p := range pg.Prefixes {
					if len(p)+1 > len(prefix) {
						children = append(children, p+"/")
					}
				}
				for _, o := range pg.Objects {
					if err := fn(o); err != nil {
						return err
					}
				}
				if pg.Next == "" {
					break
				}
				token = pg.Next
			}
			for _, c := range dedupe(children) {
				name := childName(prefix, c)
				if depth+1 >= walkExpandDepth || isCheckpointFolder(name) || name == "shared" || name == "taskowned" {
					s.flatWalk(g, c, fn)
				} else {
					expand(c, depth+1)
				}
			}
			return nil
		})
	}
	expand(prefix, 0)
	return g.Wait()
}

// flatWalk walks every key below prefix; a walk longer than one page is split into ranges (see above).
func (s *Store) flatWalk(g *group, prefix string, fn func(s3client.Object) error) {
	g.Go(func(ctx context.Context) error {
		pg, err := s.c.ListPage(ctx, prefix, false, "", "", 1000)
		if err != nil {
			return err
		}
		for _, o := range pg.Objects {
			if err := fn(o); err != nil {
				return err
			}
		}
		if pg.Next == "" {
			return nil
		}
		last := pg.Objects[len(pg.Objects)-1].Key
		bounds := []string{last}
		for _, c := range splitChars {
			if b := prefix + string(c); b > last {
				bounds = append(bounds, b)
			}
		}
		sort.Strings(bounds)
		for i, from := range bounds {
			to := ""
			if i+1 < len(bounds) {
				to = bounds[i+1]
			}
			g.Go(func(ctx context.Context) error { return s.walkRange(ctx, prefix, from, to, fn) })
		}
		return nil
	})
}

// walkRange reports the keys k below prefix with from < k <= to ("" to: no upper bound).
func (s *Store) walkRange(ctx context.Context, prefix, from, to string, fn func(s3client.Object) error) error {
	token := ""
	for {
		start := ""
		if token == "" {
			start = from
		}
		pg, err := s.c.ListPage(ctx, prefix, false, token, start, 1000)
		if err != nil {
			return err
		}
		for _, o := range pg.Objects {
			if to != "" && o.Key > to {
				return nil
			}
			if err := fn(o); err != nil {
				return err
			}
		}
		if pg.Next == "" {
			return nil
		}
		token = pg.Next
	}
}
