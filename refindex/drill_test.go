package refindex_test

import (
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// drillStore copies the real Flink store testdata/flink/<version>/<scenario>/store to a temp dir and
// gives every referenced file the size its handles declare (the fixtures keep empty placeholders):
// sparse, so that the drill sees a store as Flink left it. It returns the store root and the map
// prefix tying Flink's file: URIs to it.
func drillStore(t *testing.T, version, scenario string) (root, prefix string) {
	t.Helper()
	src := filepath.Join("..", "testdata", "flink", version, scenario, "store")
	root = filepath.Join(t.TempDir(), "store")
	if err := os.CopyFS(root, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	prefix = "file:/tmp/ckguard-fixtures/" + version + "/" + scenario + "/store"
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "_metadata" {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		m, err := flinkmeta.ParseBytes(b, p, flinkmeta.Options{})
		if err != nil {
			return err
		}
		for _, r := range m.References(p) {
			local := r.Resolved
			if rel, ok := strings.CutPrefix(r.Resolved, prefix+"/"); ok {
				local = filepath.Join(root, rel)
			}
			if r.Kind == flinkmeta.RefDirectory {
				if err := os.MkdirAll(local, 0o755); err != nil {
					return err
				}
				continue
			}
			want := r.StateSize
			if r.Kind == flinkmeta.RefSegment {
				want = r.Offset + r.Length
			}
			// A file Flink itself deleted (the claimed checkpoint of the file-merging scenario lost
			// some) is put back too: these tests are about sizes, verify's own tests about existence.
			if fi, err := os.Stat(local); err != nil || fi.Size() < want {
				if err := os.MkdirAll(filepath.Dir(local), 0o755); err != nil {
					return err
				}
				f, err := os.OpenFile(local, os.O_CREATE|os.O_WRONLY, 0o644)
				if err != nil {
					return err
				}
				f.Close()
				if err := os.Truncate(local, want); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return root, prefix
}

// largestState is the largest state file of root (an SST, a file-merging physical file holding
// segments, a changelog file), as a store key.
func largestState(t *testing.T, root string) (string, int64) {
	t.Helper()
	var best string
	var size int64
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() == "_metadata" || strings.HasSuffix(p, ".json") {
			return err
		}
		if fi, err := d.Info(); err == nil && fi.Size() > size {
			rel, _ := filepath.Rel(root, p)
			best, size = filepath.ToSlash(rel), fi.Size()
		}
		return nil
	})
	if best == "" {
		t.Fatalf("no state file in %s", root)
	}
	return best, size
}

// TestDrillTruncatedSST: a referenced SST cut short by one byte still exists, so verify stays green;
// the drill names it, its size and the size its handle declares, and every checkpoint using it.
func TestDrillTruncatedSST(t *testing.T) {
	for _, tc := range []struct{ version, scenario string }{
		{"2.2", "incremental"},
		{"2.2", "file-merging"}, // segment handles: offset + length within the physical file
		{"1.20", "incremental"},
		{"2.0", "changelog"},
	} {
		t.Run(tc.version+"/"+tc.scenario, func(t *testing.T) {
			ctx := context.Background()
			root, prefix := drillStore(t, tc.version, tc.scenario)
			ix := openListingIndex(t, localStore(t, root), prefix)
			if v, err := ix.Verify(ctx); err != nil || !v.OK {
				t.Fatalf("verify of the intact store: %+v, %v", v, err)
			}
			d, err := ix.Drill(ctx, refindex.DrillOptions{})
			if err != nil || !d.OK {
				t.Fatalf("drill of the intact store: %+v, %v", d.Broken, err)
			}
			if d.OutsideSkipped != 0 || d.Objects == 0 || len(d.Checkpoints) != d.Checked {
				t.Fatalf("drill checked %d objects, %d outside, %d of %d checkpoints listed", d.Objects, d.OutsideSkipped, len(d.Checkpoints), d.Checked)
			}

			key, size := largestState(t, root)
			if err := os.Truncate(filepath.Join(root, key), size-1); err != nil {
				t.Fatal(err)
			}
			if v, err := ix.Verify(ctx); err != nil || !v.OK {
				t.Fatalf("verify checks existence only and must stay green: %+v, %v", v, err)
			}
			d, err = ix.Drill(ctx, refindex.DrillOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if d.OK || len(d.Broken) == 0 {
				t.Fatalf("drill green over a truncated %s", key)
			}
			for _, b := range d.Broken {
				if len(b.Short) != 1 || b.Short[0].Path != key || b.Short[0].Size != size-1 || b.Short[0].Expected != size {
					t.Errorf("%s: short = %+v, want %s: %d bytes, expected %d", b.Metadata, b.Short, key, size-1, size)
				}
			}
			bad := map[string]bool{}
			for _, b := range d.Broken {
				bad[b.Metadata] = true
			}
			for _, c := range d.Checkpoints {
				if c.OK == bad[c.Metadata] {
					t.Errorf("%s: ok = %v but broken = %v", c.Metadata, c.OK, bad[c.Metadata])
				}
			}
		})
	}
}

// TestDrillRead reads every byte of every referenced object and counts them.
func TestDrillRead(t *testing.T) {
	ctx := context.Background()
	root, prefix := drillStore(t, "2.2", "file-merging")
	ix := openListingIndex(t, localStore(t, root), prefix)
	var calls int
	var last, total int64
	d, err := ix.Drill(ctx, refindex.DrillOptions{Read: true, Progress: func(done, all int64) { calls++; last, total = done, all }})
	if err != nil || !d.OK {
		t.Fatalf("drill --read: %+v, %v", d, err)
	}
	if d.BytesRead == 0 || d.BytesRead != total || last != total || calls == 0 || !d.Read {
		t.Fatalf("read %d bytes, progress said %d of %d in %d calls", d.BytesRead, last, total, calls)
	}

	// A referenced file that cannot be read (a directory where a file should be: EISDIR on read).
	key, _ := largestState(t, root)
	p := filepath.Join(root, key)
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p, 0o755); err != nil {
		t.Fatal(err)
	}
	d, err = ix.Drill(ctx, refindex.DrillOptions{Read: true})
	if err != nil {
		t.Fatal(err)
	}
	if d.OK {
		t.Fatalf("drill --read green with %s a directory", key)
	}
}

// TestDrillReadRate: a read capped at half the referenced bytes per second takes at least two seconds
// and reports a rate within the cap, so that a drill on a live store never takes more bandwidth than it
// was given. (Only the lower bound is asserted: a loaded machine reads slower, never faster.)
func TestDrillReadRate(t *testing.T) {
	ctx := context.Background()
	root, prefix := drillStore(t, "2.2", "file-merging")
	ix := openListingIndex(t, localStore(t, root), prefix)
	free, err := ix.Drill(ctx, refindex.DrillOptions{Read: true})
	if err != nil || !free.OK || free.BytesRead == 0 {
		t.Fatalf("uncapped drill --read: %+v, %v", free, err)
	}
	rate := free.BytesRead / 2
	var dones []int64
	start := time.Now()
	d, err := ix.Drill(ctx, refindex.DrillOptions{Read: true, ReadRate: rate, Progress: func(done, _ int64) { dones = append(dones, done) }})
	took := time.Since(start)
	if err != nil || !d.OK || d.BytesRead != free.BytesRead {
		t.Fatalf("capped drill --read: %+v, %v", d, err)
	}
	if took < 1900*time.Millisecond || d.ReadSeconds < 1.9 {
		t.Errorf("%d bytes read at a cap of %d bytes/s in %v (reported %.2f s), want at least 2 s", d.BytesRead, rate, took, d.ReadSeconds)
	}
	if capMB := float64(rate) / (1 << 20); d.MBPerSecond > capMB*1.05 {
		t.Errorf("reported %.3f MB/s, above the cap of %.3f", d.MBPerSecond, capMB)
	}
	for i := 1; i < len(dones); i++ {
		if dones[i] < dones[i-1] {
			t.Fatalf("progress went back: %v", dones)
		}
	}
	if len(dones) == 0 || dones[len(dones)-1] != d.BytesRead {
		t.Errorf("progress ended at %v, want %d", dones, d.BytesRead)
	}
}
