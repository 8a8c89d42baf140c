package main

import (
	"fmt"
	"time"

	"github.com/ckguard/ckguard/refindex"
	"github.com/ckguard/ckguard/s3backend/deleteq"
)

// pendingDeletes reads the S3 mount's delete queue journal in the index directory (it needs no lock: a
// running mount's journal is read as it is). nil when nothing is pending.
func pendingDeletes(indexDir string) (*refindex.PendingDeletes, map[string]bool, error) {
	rp, err := deleteq.ReadJournal(indexDir)
	if err != nil || len(rp.Pending) == 0 && rp.Damaged == 0 {
		return nil, nil, err
	}
	pd := &refindex.PendingDeletes{Count: len(rp.Pending), Damaged: rp.Damaged}
	keys := make(map[string]bool, len(rp.Pending))
	for _, e := range rp.Pending {
		keys[e.Key] = true
		if pd.Oldest.IsZero() || e.Queued.Before(pd.Oldest) {
			pd.Oldest = e.Queued
		}
		pd.FailedAttempts += e.Attempts
		if e.LastErr != "" {
			pd.LastError = e.LastErr
		}
	}
	return pd, keys, nil
}

// pendingRow is the stats line of the delete queue.
func pendingRow(pd *refindex.PendingDeletes) [2]string {
	v := fmt.Sprintf("%d acknowledged, not applied to the bucket yet", pd.Count)
	if !pd.Oldest.IsZero() {
		v += fmt.Sprintf(" (oldest %s ago)", time.Since(pd.Oldest).Round(time.Second))
	}
	if pd.FailedAttempts > 0 {
		v += fmt.Sprintf("; %d failed attempts, last: %s", pd.FailedAttempts, pd.LastError)
	}
	if pd.Damaged > 0 {
		v += fmt.Sprintf("; %d unreadable journal lines (their deletions are not applied)", pd.Damaged)
	}
	return [2]string{"pending deletions", v}
}

// dropPending leaves out of res the objects whose deletion is queued.
func dropPending(res *refindex.OrphansResult, keys map[string]bool) {
	if len(keys) == 0 {
		return
	}
	out := res.Files[:0]
	for _, f := range res.Files {
		if keys[f.Path] {
			res.PendingDeletion++
			res.Bytes -= f.Size
			continue
		}
		out = append(out, f)
	}
	res.Files = out
}
