package main

// The restorability drill: verify --deep / --read, and latest (the newest checkpoint of a job that
// passes it).

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/refindex"
)

// defaultReadRate caps verify --read so that a drill on a live store does not starve Flink's own
// checkpoint uploads and restores of bandwidth.
const defaultReadRate = "50MiB"

func drillFlags() []cli.Flag {
	return []cli.Flag{
		&cli.BoolFlag{Name: "deep", Usage: "restorability drill: every referenced file must also be readable and at least as large as its handle says"},
		&cli.BoolFlag{Name: "read", Usage: "with the drill, read every byte of every referenced file (implies --deep)"},
		&cli.StringFlag{Name: "read-rate", Value: defaultReadRate, Usage: "cap --read at this many bytes per second (e.g. 50MiB, 1GB, 0 = no cap)"},
	}
}

// parseRate reads a byte rate: a number with an optional unit B, KB, MB, GB (powers of 1000) or
// KiB, MiB, GiB (powers of 1024), optionally followed by /s.
func parseRate(s string) (int64, error) {
	t := strings.TrimSuffix(strings.TrimSpace(s), "/s")
	i := strings.IndexFunc(t, func(r rune) bool { return (r < '0' || r > '9') && r != '.' })
	num, unit := t, ""
	if i >= 0 {
		num, unit = t[:i], t[i:]
	}
	mult := map[string]float64{"": 1, "B": 1, "KB": 1e3, "MB": 1e6, "GB": 1e9, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]
	f, err := strconv.ParseFloat(num, 64)
	if err != nil || mult == 0 || f < 0 {
		return 0, fmt.Errorf("--read-rate %q is not a byte rate: write a number with B, KB, MB, GB, KiB, MiB or GiB, e.g. 50MiB (0 = no cap)", s)
	}
	return int64(f * mult), nil
}

// drillIndex opens the index for a drill: directly (the drill reads the store itself), synced with
// the store unless --no-sync.
func drillIndex(c *cli.Context) (*refindex.Index, error) {
	ix, err := openIndex(c)
	if errors.Is(err, refindex.ErrLocked) {
		// The drill re-reads the store itself; an index of its own, built from the store alone,
		// answers the same as the mount's.
		return nil, exitf(exitUsage, "ckguard %s: a running mount holds the index %s and the drill does not run through it: give --index a scratch directory (the drill builds its own index from the store)", c.Command.FullName(), c.String("index"))
	}
	if err != nil {
		return nil, err
	}
	if !c.Bool("no-sync") {
		if err := ix.Sync(c.Context); err != nil {
			ix.Close()
			return nil, exitf(exitUntrusted, "sync index with %s: %v", c.String("store"), err)
		}
	}
	return ix, nil
}

// drillOptions reads --read and --read-rate.
func drillOptions(c *cli.Context) (refindex.DrillOptions, error) {
	o := refindex.DrillOptions{Read: c.Bool("read")}
	if o.Read {
		r, err := parseRate(c.String("read-rate"))
		if err != nil {
			return o, usageError(c, "%v", err)
		}
		o.ReadRate = r
		o.Progress = readProgress(os.Stderr, time.Now)
	}
	return o, nil
}

// readProgress reports the bytes read: a bar redrawn on a terminal, else a line every progressEvery.
func readProgress(f *os.File, now func() time.Time) func(done, total int64) {
	term := isTerminal(f)
	start, last := now(), time.Time{}
	return func(done, total int64) {
		t := now()
		every := progressEvery
		if term {
			every = 200 * time.Millisecond
		}
		if t.Sub(last) < every && done < total {
			return
		}
		last = t
		rate := 0.0
		if s := t.Sub(start).Seconds(); s > 0 {
			rate = float64(done) / (1 << 20) / s
		}
		pct := 100.0
		if total > 0 {
			pct = 100 * float64(done) / float64(total)
		}
		line := fmt.Sprintf("reading: %s of %s (%.0f%%), %.1f MB/s", humanBytes(done), humanBytes(total), pct, rate)
		if term {
			end := ""
			if done >= total {
				end = "\n"
			}
			fmt.Fprintf(f, "\r%s\x1b[K%s", line, end)
			return
		}
		fmt.Fprintln(f, line)
	}
}

// drill runs the restore drill the command's flags describe over the checkpoints only accepts (nil: every
// live checkpoint), on an index opened for this run and closed before it returns; root is the store's
// root, which checkpoint directories are relative to.
func drill(c *cli.Context, only func(refindex.CheckpointInfo) bool) (res *refindex.DrillResult, root string, err error) {
	o, err := drillOptions(c)
	if err != nil {
		return nil, "", err
	}
	o.Only = only
	ix, err := drillIndex(c)
	if err != nil {
		return nil, "", err
	}
	defer ix.Close()
	res, err = ix.Drill(c.Context, o)
	return res, ix.Store().Root(), err
}

func runDrill(c *cli.Context) error {
	res, _, err := drill(c, nil)
	if err != nil {
		return err
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, res); err != nil {
			return err
		}
	} else {
		printDrill(c.App.Writer, res)
	}
	return verifyExit("verify --deep", &res.VerifyResult)
}

func printDrill(w io.Writer, res *refindex.DrillResult) {
	printVerify(w, &res.VerifyResult)
	if res.Read {
		fmt.Fprintf(w, "read %s in %.1f s: %.1f MB/s\n", humanBytes(res.BytesRead), res.ReadSeconds, res.MBPerSecond)
	}
}

func latestCommand() *cli.Command {
	return &cli.Command{
		Name:      "latest",
		Usage:     "print the newest checkpoint or savepoint of a job that passes the restorability drill (the path for `flink run -s`)",
		ArgsUsage: " ",
		Flags: append(append(locationFlags(), jsonFlag(),
			&cli.StringFlag{Name: "job", Usage: "the job: its checkpoint folder (a store path, e.g. flink/<job-id>) or its job id (required)"},
			&cli.BoolFlag{Name: "no-sync", Usage: "do not sync the index with the store first"},
		), drillFlags()[1:]...),
		Description: "Runs the drill of `verify --deep` (with --read: every byte) on the job's checkpoints and savepoints,\n" +
			"newest first, and prints the first that passes as an absolute path or URI. Broken newer ones are listed\n" +
			"on stderr. Exit 1 when none passes.\n\n" +
			"EXAMPLES:\n" +
			"   flink run -s \"$(ckguard latest --job 3f1c0a… --store /srv/flink/checkpoints)\" job.jar\n" +
			"   ckguard latest --job flink/3f1c0a… --store s3://bucket/flink --json",
		Before: requireStore,
		Action: runLatest,
	}
}

// LatestResult is the answer of latest.
type LatestResult struct {
	Job string `json:"job"`
	// Path is what to give `flink run -s`: the checkpoint's directory, absolute or as a URI.
	Path       string                      `json:"path"`
	Checkpoint *refindex.DrilledCheckpoint `json:"checkpoint"`
	Skipped    []refindex.BrokenCheckpoint `json:"skipped"`
}

// jobMatcher says whether a checkpoint belongs to job: the job folder as a store path, or a job id
// (the folder's name, or a savepoint named savepoint-<first 6 characters of the id>-…).
func jobMatcher(c *cli.Context, job string) func(refindex.CheckpointInfo) bool {
	key := storeKey(c, job)
	return func(ci refindex.CheckpointInfo) bool {
		if ci.Job == key || path.Base(ci.Job) == job {
			return true
		}
		if ci.Kind == "savepoint" && len(job) >= 6 && !strings.Contains(job, "/") {
			return strings.HasPrefix(path.Base(ci.Dir), "savepoint-"+job[:6]+"-")
		}
		return false
	}
}

func runLatest(c *cli.Context) error {
	job := c.String("job")
	if job == "" {
		return usageError(c, "--job is required: the job's checkpoint folder or its job id")
	}
	if c.Args().Len() > 0 {
		return usageError(c, "takes no arguments (give the job with --job)")
	}
	res, root, err := drill(c, jobMatcher(c, job))
	if err != nil {
		return err
	}
	cks := res.Checkpoints
	if len(cks) == 0 {
		return exitf(exitFound, "ckguard latest: no live checkpoint or savepoint of job %q in %s (see `ckguard checkpoints`)", job, c.String("store"))
	}
	// Newest first: by completion time, then by checkpoint id.
	sort.SliceStable(cks, func(a, b int) bool {
		if !cks[a].Completed.Equal(cks[b].Completed) {
			return cks[a].Completed.After(cks[b].Completed)
		}
		return cks[a].ID > cks[b].ID
	})
	broken := map[string]refindex.BrokenCheckpoint{}
	for _, b := range res.Broken {
		broken[b.Metadata] = b
	}
	out := LatestResult{Job: job, Skipped: []refindex.BrokenCheckpoint{}}
	for i := range cks {
		ck := &cks[i]
		if ck.OK && ck.Unchecked == 0 {
			out.Checkpoint = ck
			out.Path = strings.TrimSuffix(root, "/") + "/" + ck.Dir
			break
		}
		b, ok := broken[ck.Metadata]
		if !ok {
			b = refindex.BrokenCheckpoint{Metadata: ck.Metadata, Error: fmt.Sprintf("%s outside the guarded store could not be checked", plural(ck.Unchecked, "reference"))}
		}
		out.Skipped = append(out.Skipped, b)
	}
	if c.Bool("json") {
		if err := printJSON(c.App.Writer, out); err != nil {
			return err
		}
	} else {
		if len(out.Skipped) > 0 {
			printBrokenSkipped(c.App.ErrWriter, out.Skipped)
		}
		if out.Checkpoint != nil {
			fmt.Fprintln(c.App.Writer, out.Path)
		}
	}
	if out.Checkpoint == nil {
		return exitf(exitFound, "ckguard latest: none of the %s of job %q passes the drill", plural(len(cks), "checkpoint"), job)
	}
	return nil
}

func printBrokenSkipped(w io.Writer, skipped []refindex.BrokenCheckpoint) {
	for _, b := range skipped {
		fmt.Fprintf(w, "skipped %s:", b.Metadata)
		switch {
		case b.Error != "":
			fmt.Fprintf(w, " %s", b.Error)
		default:
			if b.MissingCount > 0 {
				fmt.Fprintf(w, " %s missing", plural(b.MissingCount, "file"))
			}
			for _, s := range b.Short {
				fmt.Fprintf(w, " %s is %d bytes, needs %d;", s.Path, s.Size, s.Expected)
			}
			for _, u := range b.Unreadable {
				fmt.Fprintf(w, " %s unreadable: %s;", u.Path, u.Error)
			}
		}
		fmt.Fprintln(w)
	}
}
