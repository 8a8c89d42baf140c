package s3store

import (
	"context"
	"sync/atomic"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/s3backend/s3client"
)

// A full walk of a big bucket is one ListObjectsV2 page (1,000 keys) after another, each waiting for the
// previous one's continuation token: at 20 ms per request and 20 ms of decoding per page, 1 M objects take
// 40 s, 100 M over an hour. parallelWalk lists the job folders at once: folders are listed with a
// delimiter from the prefix down until a folder holds Flink's job layout (a chk-<n>, savepoint-*,
// shared or taskowned folder) or walkExpandDepth levels are reached; such a folder is then walked flat,
// in parallel with the others. The extra cost is one delimiter listing per folder above the job folders
// and per job folder; every key is reported exactly once (a walked folder's direct objects come from its
// flat walk, not from its delimiter listing). A single huge job folder is still one sequential walk.
const walkExpandDepth = 6

// parallelWalk calls fn (concurrently, from several goroutines) for every object below prefix ("" or
// ending in '/'). An error from fn or S3 stops the walk and is returned.
// It returns the number of listing requests it made.
func (s *Store) parallelWalk(ctx context.Context, prefix string, fn func(s3client.Object) error) (int64, error) {
	g := newGroup(ctx, s.opts.Parallel)
	var pages atomic.Int64
	var flatRange func(ctx context.Context, prefix, from, to string) error
	flat := func(ctx context.Context, prefix string) error {
		return s.c.WalkPages(ctx, prefix, func() { pages.Add(1) }, fn)
	}
	var expand func(prefix string, depth int)
	expand = func(prefix string, depth int) {
		g.Go(func(ctx context.Context) error {
			if !cleanPrefix(prefix) || depth >= walkExpandDepth {
				return flat(ctx, prefix) // raw keys, one flat walk
			}
			var children []string
			var objects []s3client.Object
			job, flushed := false, false
			token := ""
			for {
				pg, err := s.c.ListPage(ctx, prefix, true, token, "", 1000)
				if err != nil {
					return err
				}
				pages.Add(1)
				for _, p := range pg.Prefixes {
					if len(p)+1 > len(prefix) && !store.InQuarantine(p) { // ckguard's own folders are no store data
						c := p + "/"
						children = append(children, c)
						name := childName(prefix, c)
						// Once direct objects were reported, the folder is expanded, never walked flat.
						job = job || !flushed && (flinklayout.IsJobFolderEntry(name) || flinklayout.IsSavepointDir(name))
					}
				}
				if job {
					break // walked flat below: this listing's objects would be reported twice
				}
				objects = append(objects, pg.Objects...)
				if len(objects) >= 1000 {
					// A folder of many direct objects: report them as they come.
					for _, o := range objects {
						if err := fn(o); err != nil {
							return err
						}
					}
					objects = objects[:0]
					flushed = true
				}
				if pg.Next == "" {
					break
				}
				token = pg.Next
			}
			if job {
				return flat(ctx, prefix)
			}
			children = dedupe(children)
			if len(children) > s.opts.Parallel && !flushed {
				// Many folders (a root of thousands of jobs; the random top-level folders of entropy
				// injection): one listing per folder would cost more requests than the objects' pages.
				// Consecutive folders are walked flat in groups instead, each group one key range.
				rangeWalk(g, prefix, children, 4*s.opts.Parallel, flatRange)
				return nil
			}
			for _, o := range objects {
				if err := fn(o); err != nil {
					return err
				}
			}
			for _, c := range children {
				expand(c, depth+1)
			}
			return nil
		})
	}
	flatRange = func(ctx context.Context, prefix, from, to string) error {
		token := ""
		for {
			start := ""
			if token == "" && from != "" {
				start = from[:len(from)-1] // just below the group's first folder: StartAfter is exclusive
			}
			pg, err := s.c.ListPage(ctx, prefix, false, token, start, 1000)
			if err != nil {
				return err
			}
			pages.Add(1)
			for _, o := range pg.Objects {
				if from != "" && o.Key < from {
					continue // between from[:len-1] and from: the previous range's
				}
				if to != "" && o.Key >= to {
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
	expand(prefix, 0)
	err := g.Wait()
	return pages.Load(), err
}

// rangeWalk walks the keys below prefix in at most n ranges cut at child folders: range i holds the keys k
// with start(i) <= k < start(i+1), where start(0) is the beginning of prefix (""), start(i) the first
// folder of group i, and the last range runs to the end. The ranges partition the keys below prefix (the
// folder's own objects included, wherever they sort), so each is reported exactly once.
func rangeWalk(g *group, prefix string, children []string, n int, walk func(ctx context.Context, prefix, from, to string) error) {
	per := (len(children) + n - 1) / n
	var starts []string
	for i := per; i < len(children); i += per {
		starts = append(starts, children[i])
	}
	from := ""
	for i := 0; i <= len(starts); i++ {
		to := ""
		if i < len(starts) {
			to = starts[i]
		}
		f := from
		g.Go(func(ctx context.Context) error { return walk(ctx, prefix, f, to) })
		from = to
	}
}
