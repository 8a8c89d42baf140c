package treegen

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLargeLinkData: with LinkData every data file of a job is the job's first one under another name
// (one inode per job, the bench's 10 M objects fit the disk), and the store holds the same keys as without
// it: each distinct referenced object once, with its byte.
func TestLargeLinkData(t *testing.T) {
	for _, tc := range []struct {
		name string
		link bool
	}{{"files", false}, {"links", true}} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			spec := LargeSpec{Jobs: 2, CheckpointsPerJob: 3, RefsPerCheckpoint: 10, NewPerCheckpoint: 3, DataFiles: true, LinkData: tc.link, Seed: "t"}
			res, err := Large(dir, spec, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			firsts := map[string]os.FileInfo{} // job folder -> one of its data files
			shared, data := 0, 0
			err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || d.IsDir() || !strings.Contains(p, "/shared/") {
					return err
				}
				data++
				b, err := os.ReadFile(p)
				if err != nil || len(b) != 1 {
					t.Errorf("%s: %q, %v; want one byte", p, b, err)
				}
				fi, err := os.Stat(p)
				if err != nil {
					return err
				}
				job := p[:strings.Index(p, "/shared/")]
				if f, ok := firsts[job]; !ok {
					firsts[job] = fi
				} else if os.SameFile(f, fi) {
					shared++
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			if data != res.Distinct {
				t.Errorf("%d data files, want %d (the distinct referenced objects)", data, res.Distinct)
			}
			want := 0
			if tc.link {
				want = res.Distinct - spec.Jobs
			}
			if shared != want {
				t.Errorf("%d data files share their job's first one's inode, want %d", shared, want)
			}
		})
	}
}
