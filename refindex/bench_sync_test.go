package refindex_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkSync measures a sync of the benchmark store (see benchStore): with nothing changed (a
// listing compared with the index) and with 1% of the _metadata given a new mtime, which makes the
// sync read, parse and apply them again as changed checkpoints.
func BenchmarkSync(b *testing.B) {
	dir, _ := benchStore(b)
	ix, _ := benchIndex(b)
	defer ix.Close()
	ctx := context.Background()
	if err := ix.Sync(ctx); err != nil {
		b.Fatal(err)
	}
	res, err := ix.Checkpoints(ctx, "")
	if err != nil {
		b.Fatal(err)
	}
	var metas []string
	for _, j := range res.Jobs {
		for _, c := range j.Checkpoints {
			metas = append(metas, c.Metadata)
		}
	}
	b.Run("unchanged", func(b *testing.B) {
		for b.Loop() {
			if err := ix.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("changed-1pct", func(b *testing.B) {
		n := max(1, len(metas)/100)
		base := time.Now().Add(-12 * time.Hour).Truncate(time.Second)
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			mt := base.Add(time.Duration(i+1) * time.Second)
			for k := range n {
				p := filepath.Join(dir, "store", metas[(i*n+k)%len(metas)])
				if err := os.Chtimes(p, mt, mt); err != nil {
					b.Fatal(err)
				}
			}
			b.StartTimer()
			if err := ix.Sync(ctx); err != nil {
				b.Fatal(err)
			}
		}
	})
}
