package s3store

import (
	"context"
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// The checkpoints of a job folder, in one listing instead of one HEAD each.
//
// A job folder's delimiter listing names its chk-<n> folders; the descent must then learn, for each,
// whether chk-<n>/_metadata exists and its ETag, size and time. A HEAD per folder costs one request
// per checkpoint at every sync (20,000 checkpoints: 20,000 requests). A flat ListObjectsV2 of
// "<job>/chk-" reports the same objects with the same fields, up to 1,000 keys per request, in key
// order: where the checkpoint folders hold few files (Flink's incremental checkpoints keep their SSTs
// in shared/, a chk-<n> folder holds its _metadata and a few exclusive files) one request answers for
// all of a job's checkpoints.
//
// The listing is complete up to the last key it returned: a checkpoint whose `<job>/chk-<n>/_metadata`
// sorts at or before that key and was not listed has none (as a 404 on HEAD says). So it can stop
// after any page: once every checkpoint is answered for, or, HEADing the checkpoints it has not
// reached, when a page answered for fewer checkpoints than it cost. A page costs the client about one
// request plus one per listKeysPerRequest keys decoded, and it asks for at most listKeysPerRequest
// keys per checkpoint not answered for yet: where the checkpoint folders hold fewer files than that
// on average, one page answers for all of them; where they hold more (full checkpoints, unaligned
// checkpoints' channel state) the listing costs at most about one request per checkpoint more than
// the HEADs, once: the job's checkpoints are then HEADed for the next descentRetry descents before the
// listing is tried again. Fewer than flatMin checkpoints are HEADed (one HEAD is cheaper than a listing).
//
// A listing that is not in key order below its prefix proves nothing about what it did not report
// (a server or proxy that does not sort): the job's checkpoints are HEADed instead. Every S3 error
// aborts the descent (fail closed), as a failed HEAD does.
//
// The listing also reports a `_metadata` below a checkpoint folder (chk-<n>/x/_metadata, or one under
// an odd key such as chk-<n>//_metadata, reported raw) where HEADs never look: it is reported, and
// recorded like one the reconciliation walk found, so that a later descent that HEADs this job's
// checkpoints still reports it.

// flatMin is the least number of checkpoint folders of a job that are listed flat rather than HEADed.
const flatMin = 2

// listKeysPerRequest is how many keys of a listing page cost the client as much CPU as one small
// request (HEAD, short listing): measured with versitygw on 127.0.0.1, about 17 µs to decode a key
// against 0.4–0.5 ms per request (BenchmarkS3SyncCheckpoints with CKGUARD_BENCH_S3_EXCLUSIVE).
const listKeysPerRequest = 25

// checkpoints reports the `_metadata` of the checkpoint folders ckpts (listing prefixes ending in '/')
// of the job folder job.
func (d *descent) checkpoints(job string, ckpts []string) {
	if d.known != nil {
		var unknown []string
		for _, c := range ckpts {
			if !d.known(c + flinklayout.MetadataName) {
				unknown = append(unknown, c)
			}
		}
		ckpts = unknown
	}
	if len(ckpts) == 0 {
		return
	}
	if left := d.headJobs[job]; left > 0 || len(ckpts) < flatMin || d.headsOnly {
		if left > 1 {
			d.mu.Lock()
			d.nextHeadJobs[job] = left - 1
			d.mu.Unlock()
		}
		for _, c := range ckpts {
			d.head(c + flinklayout.MetadataName)
		}
		return
	}
	d.g.Go(func(ctx context.Context) error { return d.flat(ctx, job, ckpts) })
}

// flat lists "<job>/chk-" page by page and resolves ckpts (sorted) against it; see the notes above.
func (d *descent) flat(ctx context.Context, job string, ckpts []string) error {
	prefix := job + flinklayout.CheckpointPrefix
	next := 0 // ckpts[:next] are resolved
	last, token := "", ""
	for {
		want := min(1000, listKeysPerRequest*(len(ckpts)-next))
		pg, err := d.s.c.ListPage(ctx, prefix, false, token, "", int32(want))
		if err != nil {
			// The checkpoint folders not resolved yet are unknown (each its own subtree).
			for _, c := range ckpts[next:] {
				if uerr := d.unknown(ctx, c, err); uerr != nil {
					return uerr
				}
			}
			return nil
		}
		d.mu.Lock()
		d.flatPages++
		d.flatKeys += int64(len(pg.Objects))
		d.mu.Unlock()
		before := next
		for _, o := range pg.Objects {
			if !strings.HasPrefix(o.Key, prefix) || o.Key <= last {
				d.s.opts.Logger.Warn("a listing of checkpoint folders is not in key order; their _metadata are checked one by one", "store", d.s.Root(),
					"prefix", prefix, "key", o.Key, "after", last)
				d.fallBack(job, ckpts)
				return nil
			}
			last = o.Key
			// Every checkpoint whose _metadata sorts before this key and was not listed has none.
			for next < len(ckpts) && ckpts[next]+flinklayout.MetadataName < o.Key {
				next++
			}
			if next < len(ckpts) && ckpts[next]+flinklayout.MetadataName == o.Key {
				d.report(o)
				next++
				continue
			}
			if flinklayout.IsMetadata(o.Key) {
				d.report(o)
				d.s.learnListed(o.Key)
			}
		}
		if pg.Next == "" || next == len(ckpts) {
			// Complete, or complete up to every checkpoint's _metadata: those not listed have none.
			// (The rest would be other objects of chk-* names, and below the checkpoint folders.)
			return nil
		}
		token = pg.Next
		if cost := 1 + len(pg.Objects)/listKeysPerRequest; next-before < cost {
			// Checkpoint folders of many files: HEAD the checkpoints not reached yet.
			d.fallBack(job, ckpts[next:])
			return nil
		}
	}
}

// fallBack HEADs ckpts and keeps HEADing the job's checkpoints for the next descentRetry descents.
func (d *descent) fallBack(job string, ckpts []string) {
	d.mu.Lock()
	d.flatFallbacks++
	d.nextHeadJobs[job] = descentRetry
	d.mu.Unlock()
	for _, c := range ckpts {
		d.head(c + flinklayout.MetadataName)
	}
}

// learnListed records a `_metadata` the flat listing of checkpoint folders found where HEADs do not
// look (see Learn), and logs it the first time, like the reconciliation walk.
func (s *Store) learnListed(key string) {
	if s.descentSees(key) || store.InQuarantine(key) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.disc.exact == nil {
		s.disc.exact = map[string]bool{}
	}
	if !s.disc.exact[key] {
		s.opts.Logger.Warn("a _metadata where Flink does not write checkpoints; it is indexed from now on", "key", key, "store", s.Root())
		s.stats.ReconcileFound++
		s.disc.exact[key] = true
	}
}

// ListNewMetadata is ListMetadata for a caller that holds some `_metadata` already (store.NewLister):
// it may leave out the keys for which known is true, and leaves out the requests that could only
// report those (the HEAD or flat listing of checkpoint folders whose _metadata is known, the HEAD of
// a known savepoint). Every folder ListMetadata lists is listed, so a new checkpoint, job, root or
// savepoint is reported as by ListMetadata; where ListMetadata would walk the bucket, so does this.
// known is called from several goroutines and must not change while this runs.
func (s *Store) ListNewMetadata(ctx context.Context, known func(string) bool, fn func(store.ObjectInfo) error) error {
	if s.opts.FullWalk {
		_, err := s.fullWalk(ctx, fn)
		return err
	}
	if err := s.reconcileState(); err != nil {
		return err
	}
	s.mu.Lock()
	d := &s.disc
	walk := !d.descendOnly && d.walkCost != 0 && d.descentCost > 2*d.walkCost
	s.mu.Unlock()
	if walk {
		_, err := s.fullWalk(ctx, fn)
		return err
	}
	return s.descend(ctx, known, fn)
}

var _ store.NewLister = (*Store)(nil)
