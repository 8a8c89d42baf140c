// Command gentree writes a generated checkpoint store for benchmarks and demos:
//
//	go run ./refindex/treegen/gentree -out /tmp/store -jobs 100 -checkpoints 100 -refs 1000 -new 50
//	go run ./refindex/treegen/gentree -out /tmp/store -scenario incident-one
//
// It prints what it wrote as JSON (counts and sample keys).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/ckguard/ckguard/refindex/treegen"
)

func main() {
	out := flag.String("out", "", "directory to write the store into (required)")
	scenario := flag.String("scenario", "", "write a named scenario instead: incident-one, incident-two, savepoints, entropy, aliasing, unparseable, young-orphan")
	jobs := flag.Int("jobs", 100, "jobs")
	cks := flag.Int("checkpoints", 100, "live checkpoints per job")
	refs := flag.Int("refs", 1000, "shared SSTs referenced by each checkpoint")
	nw := flag.Int("new", 50, "new SSTs per checkpoint (the rest are reused from the previous one)")
	data := flag.Bool("data", false, "also create the referenced files")
	link := flag.Bool("link", false, "with -data: make each job's data files hard links to its first one (one inode per job)")
	seed := flag.String("seed", "bench", "name seed")
	flag.Parse()
	if *out == "" {
		fmt.Fprintln(os.Stderr, "gentree: -out is required")
		os.Exit(2)
	}
	now := time.Now()
	var res any
	var err error
	switch *scenario {
	case "":
		res, err = treegen.Large(*out, treegen.LargeSpec{Jobs: *jobs, CheckpointsPerJob: *cks, RefsPerCheckpoint: *refs, NewPerCheckpoint: *nw, DataFiles: *data, LinkData: *link, Seed: *seed}, now)
	case "incident-one":
		res, err = summary(treegen.IncidentOne(*out, now))
	case "incident-two":
		res, err = summary(treegen.IncidentTwo(*out, now))
	case "savepoints":
		res, err = summary(treegen.SavepointsRelative(*out, now))
	case "entropy":
		res, err = summary(treegen.Entropy(*out, now))
	case "aliasing":
		res, err = summary(treegen.SchemeAliasing(*out, now))
	case "unparseable":
		res, err = summary(treegen.Unparseable(*out, now))
	case "young-orphan":
		res, err = summary(treegen.YoungOrphan(*out, now))
	default:
		err = fmt.Errorf("unknown scenario %q", *scenario)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gentree:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	enc.Encode(res)
}

func summary(t *treegen.Tree, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	p := treegen.DefaultPolicy
	return map[string]any{
		"root": t.Root, "maps": t.Maps, "entropy_key": t.EntropyKey, "purge": t.Purge,
		"files": len(t.Files), "live": len(t.Live), "referenced": t.Referenced(),
		"orphans": t.Orphans(p, 0), "survivors_of_purge": t.Survivors(t.Purge, p),
	}, nil
}
