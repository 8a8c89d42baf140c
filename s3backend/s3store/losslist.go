package s3store

import (
	"context"
	"strings"

	"github.com/ckguard/ckguard/refindex"
)

var _ refindex.DirLister = (*Store)(nil)

// ListDirRange lists the folder dir with the delimiter (files and subfolders directly in it, 1,000 keys
// per request)
// from just before `from` until a page reaches `to`: the loss check's cheap look at a folder that holds
// many referenced objects. At most maxRequests requests, each after wait (when set); more is set when
// it stopped there.
func (s *Store) ListDirRange(ctx context.Context, dir, from, to string, maxRequests int, wait func(context.Context) (release func(), err error), fn func(key string)) (requests int, more bool, err error) {
	prefix := ""
	if dir != "" {
		prefix = strings.TrimSuffix(dir, "/") + "/"
	}
	// StartAfter is exclusive: a strict prefix of `from` sorts before it (and lists at most the few keys
	// between the two besides).
	startAfter := ""
	if strings.HasPrefix(from, prefix) && len(from) > len(prefix)+1 {
		startAfter = from[:len(from)-1]
	}
	token := ""
	for {
		if requests >= maxRequests {
			return requests, true, nil
		}
		release := func() {}
		if wait != nil {
			if release, err = wait(ctx); err != nil {
				return requests, false, err
			}
		}
		pg, err := s.c.ListPage(ctx, prefix, true, token, startAfter, 1000)
		release()
		requests++
		if err != nil {
			return requests, false, err
		}
		last := ""
		for _, o := range pg.Objects {
			fn(o.Key)
			last = max(last, o.Key)
		}
		for _, p := range pg.Prefixes {
			fn(p) // a subfolder (a file-merging handle references its directory)
			last = max(last, p+"/")
		}
		if pg.Next == "" || last >= to {
			return requests, false, nil
		}
		token = pg.Next
	}
}
