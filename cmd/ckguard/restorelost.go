package main

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/cmd/ckguard/backends"
	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/fs/lostfound"
	"github.com/ckguard/ckguard/refindex"
)

// restoreLostRounds bounds the rounds of --apply: Verify names at most 1,000 missing objects per
// checkpoint, so a larger loss is restored in rounds, each verifying again.
const restoreLostRounds = 100

func restoreLostCommand() *cli.Command {
	return &cli.Command{
		Name:  "restore-lost",
		Usage: "bring back, from S3 versions or HDFS snapshots, every referenced object deleted beside the mount (dry run unless --apply)",
		Description: "Asks the index (a running mount's, else the index opened and synced) which objects live checkpoints\n" +
			"reference and the store misses (as verify does), and looks each up in what the storage kept: on a versioned\n" +
			"S3 bucket the newest version under its delete markers (restored by removing the markers, so the very version\n" +
			"is current again, or by copying it back where the markers cannot be removed), on HDFS the newest ckguard\n" +
			"snapshot of the store root holding it (copied back). Without --apply it only lists what it would restore.\n" +
			"Nothing is replaced: an object written at the key meanwhile stays. Each restore is audited (--audit-log,\n" +
			"default INDEX/audit.jsonl). Objects staged in ckguard's own quarantine are left to `quarantine restore`.\n" +
			"Exit status: 0 everything missing is restorable (dry run) or restored and verify is green; 1 something\n" +
			"stays missing; 3 the index's answer cannot be trusted.\n\n" +
			"EXAMPLES:\n" +
			"   ckguard restore-lost --store s3://bucket/flink --index /var/lib/ckguard/s3\n" +
			"   ckguard restore-lost --apply --store s3://bucket/flink --index /var/lib/ckguard/s3",
		Flags: append(storeFlags(),
			&cli.BoolFlag{Name: "apply", Usage: "restore (without it: list what would be restored)"},
			&cli.StringFlag{Name: "audit-log", Usage: "audit log the restores are recorded in (default INDEX/audit.jsonl, the mount's)"},
		),
		Before: requireStore,
		Action: runRestoreLost,
	}
}

// restoreLostResult is the --json answer.
type restoreLostResult struct {
	Source    string           `json:"source"`
	Applied   bool             `json:"applied"`
	Items     []lostfound.Item `json:"items"`
	Truncated bool             `json:"truncated,omitempty"`
	// After is the verify after --apply.
	After *refindex.VerifyResult `json:"verify_after,omitempty"`
	// Unsettled are checkpoints with missing objects that were retired while the last verify checked
	// them, when it found no live checkpoint missing anything: their successors may need those objects.
	Unsettled []string `json:"retired_during_check,omitempty"`
}

// lostSource opens the store's memory of deleted objects: the versions of a versioned bucket (HDFS:
// the snapshots of the store root). A store that keeps none is an error naming what does.
func lostSource(c *cli.Context) (lostfound.Source, func(), error) {
	s := c.String("store")
	return backends.For(s).LostSource(c, s)
}

func runRestoreLost(c *cli.Context) error {
	apply := c.Bool("apply")
	src, closeSrc, err := lostSource(c)
	if err != nil {
		return err
	}
	defer closeSrc()
	var sink audit.Sink
	if apply {
		path := c.String("audit-log")
		if path == "" {
			dir, err := indexDir(c)
			if err != nil {
				return err
			}
			path = filepath.Join(dir, "audit.jsonl")
		}
		// Strict: each restore's record is on disk before the next request (one O_APPEND write, safe
		// beside a running mount writing the same log).
		l, err := audit.Open(path, audit.Options{FsyncInterval: -1})
		if err != nil {
			return err
		}
		defer l.Close()
		sink = l
	}
	res := restoreLostResult{Source: src.Name(), Applied: apply}
	var untrusted string
	for round := 0; round < restoreLostRounds; round++ {
		v, err := verifySettled(c)
		if err != nil {
			return err
		}
		untrusted = v.Untrusted
		res.Unsettled = nil
		if len(v.Broken) == 0 {
			res.Unsettled = v.RetiredDuringCheck
		}
		lost, truncated := lostfound.Missing(v)
		if round > 0 {
			res.After = v
		}
		if !apply || round > 0 {
			res.Truncated = truncated
		}
		if round > 0 && (!truncated || len(lost) == 0) {
			break
		}
		items := lostfound.Plan(c.Context, src, unseen(lost, res.Items))
		if !apply {
			res.Items = items
			break
		}
		err = lostfound.Apply(c.Context, src, items, sink, time.Now)
		res.Items = append(res.Items, items...)
		if err != nil {
			return err
		}
		if !anyRestored(items) && round > 0 {
			break
		}
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, res); err != nil {
			return err
		}
	} else {
		printRestoreLost(c.App.Writer, res)
	}
	return restoreLostExit(res, untrusted)
}

// verifySettled asks the index (the mount's, or opened and synced) which referenced objects are
// missing, until the answer settles (settledVerify).
func verifySettled(c *cli.Context) (*refindex.VerifyResult, error) {
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return nil, err
	}
	defer closeFn()
	return settledVerify(c.Context, q)
}

// unseen drops the lost keys an earlier round already handled.
func unseen(lost []lostfound.Lost, done []lostfound.Item) []lostfound.Lost {
	seen := map[string]bool{}
	for _, it := range done {
		seen[it.Key] = true
	}
	out := lost[:0:0]
	for _, l := range lost {
		if !seen[l.Key] {
			out = append(out, l)
		}
	}
	return out
}

func anyRestored(items []lostfound.Item) bool {
	for _, it := range items {
		if it.Restored {
			return true
		}
	}
	return false
}

func restoreLostExit(res restoreLostResult, untrusted string) error {
	bad := false
	for _, it := range res.Items {
		switch {
		case it.Err != "", it.Failed:
			bad = true
		case !it.Candidate.Restorable && !it.Candidate.Present:
			bad = true
		}
	}
	if res.Applied && res.After != nil && len(res.After.Broken) > 0 {
		bad = true
	}
	if len(res.Unsettled) > 0 {
		bad = true
	}
	switch {
	case bad:
		return cli.Exit("", exitFound)
	case untrusted != "":
		return exitf(exitUntrusted, "restore-lost cannot be trusted: %s", untrusted)
	case res.Truncated:
		return exitf(exitUntrusted, "restore-lost: more objects are missing than one pass names; run it again")
	}
	return nil
}

func printRestoreLost(w io.Writer, res restoreLostResult) {
	restorable, restored, not := 0, 0, 0
	for _, it := range res.Items {
		what := ""
		switch {
		case it.Err != "" && !it.Failed:
			what, not = "LOOKUP FAILED: "+shown(it.Err), not+1
		case it.Failed:
			what, not = "RESTORE FAILED: "+shown(it.Err), not+1
		case it.Restored:
			what, restored = "restored "+it.Candidate.Describe()+" ["+it.Method+"]", restored+1
		case it.Candidate.Restorable:
			what, restorable = "would restore "+it.Candidate.Describe(), restorable+1
		case it.Candidate.Present:
			what = it.Candidate.Describe()
		default:
			what, not = it.Candidate.Describe(), not+1
		}
		fmt.Fprintf(w, "%s: %s (referenced by %s)\n", shown(it.Key), what, plural(len(it.Checkpoints), "live checkpoint"))
	}
	if res.Applied {
		fmt.Fprintf(w, "restore-lost: %s restored from %s, %d not restorable or failed\n", plural(restored, "object"), res.Source, not)
		if res.After != nil {
			status := "OK"
			if len(res.After.Broken) > 0 {
				status = fmt.Sprintf("FAILED (%d broken checkpoints)", len(res.After.Broken))
			}
			fmt.Fprintf(w, "verify after the restore: %s\n", status)
		}
		if len(res.Unsettled) > 0 {
			printUnsettled(w, res.Unsettled)
		}
		return
	}
	if len(res.Items) == 0 && len(res.Unsettled) > 0 {
		printUnsettled(w, res.Unsettled)
		return
	}
	if len(res.Items) == 0 {
		fmt.Fprintf(w, "restore-lost: no referenced object is missing\n")
		return
	}
	fmt.Fprintf(w, "restore-lost (dry run): %s restorable from %s, %d not; run again with --apply to restore\n", plural(restorable, "object"), res.Source, not)
	if res.Truncated {
		fmt.Fprintf(w, "more missing objects than listed (1,000 per checkpoint): --apply restores in rounds\n")
	}
}

// printUnsettled says that the check did not settle (exit 1): never "nothing is missing" while
// checkpoints with missing objects kept being retired under it.
func printUnsettled(w io.Writer, retired []string) {
	fmt.Fprintf(w, "restore-lost: NOT SETTLED: checkpoints with missing objects were retired while being checked, %d times in a row (%s the last time); a job checkpoints faster than the index follows, and its newer checkpoints may need the same objects:\n",
		settleTries, plural(len(retired), "checkpoint"))
	for _, m := range retired {
		fmt.Fprintf(w, "  %s\n", shown(m))
	}
	fmt.Fprintf(w, "run restore-lost again (with the mount's --sync-interval below the job's checkpoint interval), or once the job is stopped\n")
}

// restorableFor looks the missing objects of a verify up in the store's memory of deleted objects
// (at most verifyLookups of them); nil when the store keeps none.
func restorableFor(c *cli.Context, v *refindex.VerifyResult) (map[string]lostfound.Candidate, error) {
	lost, _ := lostfound.Missing(v)
	if len(lost) == 0 {
		return nil, nil
	}
	src, closeFn, err := lostSource(c)
	if errors.Is(err, backends.ErrKeepsNothing) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer closeFn()
	out := map[string]lostfound.Candidate{}
	for i, l := range lost {
		if i == verifyLookups {
			break
		}
		cand, err := src.Find(c.Context, l.Key)
		if err != nil {
			cand = lostfound.Candidate{Key: l.Key, Reason: "lookup failed: " + err.Error()}
		}
		out[l.Key] = cand
	}
	return out, nil
}

// verifyLookups bounds the version/snapshot lookups of one verify (one request or more each).
const verifyLookups = 1000
