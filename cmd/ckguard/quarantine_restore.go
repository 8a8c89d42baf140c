package main

import (
	"fmt"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
	"github.com/ckguard/ckguard/refindex/store/shared"
)

func quarantineRestoreCommand() *cli.Command {
	return &cli.Command{
		Name:      "restore",
		Usage:     "put staged deletions back at their original paths, byte-identical, never replacing anything",
		ArgsUsage: "PATH|CHECKPOINT ... | --since T",
		Description: "PATH restores the entries staged from that file or from below that folder (rm -rf of a job folder is\n" +
			"undone by restoring the folder). A CHECKPOINT (its folder or _metadata) restores its _metadata and then every\n" +
			"staged file the restored checkpoint references, wherever it was (shared/ included). --since T restores every\n" +
			"entry deleted at or after T (RFC 3339, or a duration ago: 2h). A restore never overwrites: an entry whose\n" +
			"path is occupied stays in quarantine and is reported (exit status 1).\n\n" +
			"EXAMPLES:\n" +
			"   ckguard quarantine restore --store /srv/flink/checkpoints --index /var/lib/ckguard/flink e3d8c0a9f1b24d6e8a7b5c3d1e0f9a8b\n" +
			"   ckguard quarantine restore --store /srv/flink/checkpoints --index /var/lib/ckguard/flink af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d/chk-100274\n" +
			"   ckguard quarantine restore --store /srv/flink/checkpoints --index /var/lib/ckguard/flink --since 2026-12-01T09:00:00Z",
		Flags: quarantineFlags(
			&cli.StringFlag{Name: "since", Usage: "restore every entry deleted at or after `T` (RFC 3339, or a duration ago such as 2h)"},
		),
		Before: requireStore,
		Action: runQuarantineRestore,
	}
}

// parseSince reads --since: an RFC 3339 time, or a duration before now.
func parseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	if d, err := duration.Parse(s); err == nil {
		return now.Add(-d), nil
	}
	return time.Time{}, fmt.Errorf("--since %q: want an RFC 3339 time (2026-12-01T09:00:00Z) or a duration ago (2h, 1d)", s)
}

// below reports whether key is p or lies below folder p ("" = everything).
func below(key, p string) bool {
	return p == "" || key == p || strings.HasPrefix(key, p+"/")
}

func runQuarantineRestore(c *cli.Context) error {
	since := c.String("since")
	if (since == "") == (c.NArg() == 0) {
		return usageError(c, "give PATHs (files, folders or checkpoints) or --since T, not both and not neither")
	}
	svc, viaMount, closeFn, err := openQuarantine(c, 0)
	if err != nil {
		return err
	}
	defer closeFn()
	l, err := svc.List(c.Context)
	if err != nil {
		return err
	}
	sel := &restoreSelection{picked: map[string]bool{}}
	if since != "" {
		t, err := parseSince(since, time.Now())
		if err != nil {
			return usageError(c, "%v", err)
		}
		sel.deletedSince(l, t)
	}
	if err := sel.belowArgs(c, l); err != nil {
		return err
	}
	r, err := svc.Restore(c.Context, sel.ids)
	if err != nil {
		return err
	}
	// A restored checkpoint's references elsewhere (its job's shared/ folder): the index, which now has
	// the checkpoint again, names what it misses; those staged here come back too.
	if len(sel.checkpoints) > 0 && len(r.Restored) > 0 {
		more, err := restoreMissing(c, svc, sel.checkpoints, sel.picked)
		if err != nil {
			return err
		}
		r.Restored = append(r.Restored, more.Restored...)
		r.Failed = append(r.Failed, more.Failed...)
	}
	if err := printRestoreResult(c, r, viaMount); err != nil {
		return err
	}
	if len(r.Failed) > 0 {
		return cli.Exit("", exitFound)
	}
	return nil
}

// restoreSelection is the entries a restore asks for: each once, in the order first picked.
type restoreSelection struct {
	ids    []string
	picked map[string]bool // by entry ID
	// checkpoints is the _metadata keys restored by CHECKPOINT (or folder) arguments, whose missing
	// references restoreMissing brings back after them.
	checkpoints []string
}

func (s *restoreSelection) pick(e quarantine.Entry) {
	if !s.picked[e.ID] {
		s.picked[e.ID] = true
		s.ids = append(s.ids, e.ID)
	}
}

// deletedSince picks every entry deleted at or after t.
func (s *restoreSelection) deletedSince(l *quarantine.ListResult, t time.Time) {
	for _, e := range l.Entries {
		if !e.DeletedAt.Before(t) {
			s.pick(e)
		}
	}
}

// belowArgs picks the entries below each PATH argument (a _metadata stands for its checkpoint's whole
// folder). A PATH inside the quarantine folder, or one with nothing in quarantine, fails the command
// before anything is restored.
func (s *restoreSelection) belowArgs(c *cli.Context, l *quarantine.ListResult) error {
	for _, a := range c.Args().Slice() {
		k := storeKey(c, a)
		if store.InQuarantine(k) {
			return usageError(c, "%s is inside the quarantine folder; name the original path", a)
		}
		sel := k
		if flinklayout.IsMetadata(k) {
			// A checkpoint named by its _metadata: its whole folder, like the checkpoint named by it.
			sel = path.Dir(k)
		}
		n := 0
		for _, e := range l.Entries {
			if below(e.Key(), sel) {
				s.pick(e)
				n++
				if flinklayout.IsMetadata(e.Key()) {
					s.checkpoints = append(s.checkpoints, e.Key())
				}
			}
		}
		if n == 0 {
			if why := restoredBefore(c, sel); why != "" {
				return cli.Exit(fmt.Sprintf("ckguard quarantine restore: nothing from %s is in quarantine: %s", k, why), exitFound)
			}
			return cli.Exit(fmt.Sprintf("ckguard quarantine restore: nothing from %s is in quarantine (`ckguard quarantine list` shows what is)", k), exitFound)
		}
	}
	return nil
}

// printRestoreResult prints what came back and, on stderr, what did not (or all of it as JSON with
// --json); viaMount says whether the mount indexed the restored checkpoints already.
func printRestoreResult(c *cli.Context, r *quarantine.RestoreResult, viaMount bool) error {
	if c.Bool("json") {
		return printJSON(c.App.Writer, r)
	}
	for _, e := range r.Restored {
		fmt.Fprintf(c.App.Writer, "restored %s (%s, deleted %s)\n", shown(e.Key()), humanBytes(e.Size), fmtTime(e.DeletedAt))
	}
	for _, f := range r.Failed {
		fmt.Fprintf(c.App.ErrWriter, "ckguard: not restored: %s\n", shown(f.Error))
	}
	where := "the store directly (no mount holds the index; the next mount's sync indexes restored checkpoints)"
	if viaMount {
		where = "the running mount (restored checkpoints are indexed)"
	}
	fmt.Fprintf(c.App.Writer, "%s restored through %s, %d left in quarantine\n", plural(len(r.Restored), "entry", "entries"), where, len(r.Failed))
	return nil
}

// restoreMissing restores the staged objects that the checkpoints (their _metadata keys), live again,
// reference and miss.
func restoreMissing(c *cli.Context, svc quarantine.Service, checkpoints []string, picked map[string]bool) (*quarantine.RestoreResult, error) {
	q, closeFn, err := openQuerier(c)
	if err != nil {
		return nil, fmt.Errorf("restored the checkpoints, but cannot ask the index which of their files are missing: %w; restore those by PATH", err)
	}
	defer closeFn()
	v, err := q.Verify(c.Context)
	if err != nil {
		return nil, err
	}
	want := map[string]bool{}
	for _, ck := range checkpoints {
		want[ck] = true
	}
	missing := map[string]bool{}
	for _, b := range v.Broken {
		if want[b.Metadata] {
			for _, m := range b.Missing {
				missing[m] = true
			}
		}
	}
	l, err := svc.List(c.Context)
	if err != nil {
		return nil, err
	}
	newest := map[string]quarantine.Entry{}
	for _, e := range l.Entries {
		if missing[e.Key()] && !picked[e.ID] {
			newest[e.Key()] = e // entries are oldest first: the last one wins
		}
	}
	var ids []string
	for _, e := range newest {
		ids = append(ids, e.ID)
	}
	sort.Strings(ids)
	return svc.Restore(c.Context, ids)
}

// restoredBefore says who restored the entries below sel and when, from the restore records of the
// store's shared area (--shared mounts claim every restore there), newest first; "" when the store
// has no shared area or no record names sel.
func restoredBefore(c *cli.Context, sel string) string {
	area, err := openSharedArea(c)
	if err != nil || area == nil {
		return ""
	}
	rs, err := shared.Restores(c.Context, area)
	if err != nil {
		return ""
	}
	var last *shared.Restore
	for i, r := range rs {
		if r.State == shared.RestoreFailed || !below(r.Key, sel) {
			continue
		}
		if last == nil || r.At.After(last.At) {
			last = &rs[i]
		}
	}
	if last == nil {
		return ""
	}
	// A claim still under way (its move just done, its outcome not recorded yet): wait a little for
	// the outcome, as a mount does, so the answer says what happened.
	for deadline := time.Now().Add(5 * time.Second); last.State == shared.Restoring && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if r, ok, err := shared.RestoreOf(c.Context, area, last.Entry); err == nil && ok {
			last = &r
		}
	}
	return (&shared.AlreadyRestoredError{Rec: *last}).Error()
}
