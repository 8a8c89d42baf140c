package refindex

import (
	"fmt"
	"path"
	"strings"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/flinkrest"
)

// Deletions Flink makes itself, which the loss check reports as expected rather than lost. Facts
// (Flink's CompletedCheckpoint, CheckpointProperties, the REST CheckpointConfigHandler):
//
//   - Flink deletes a completed checkpoint it owns when it is subsumed and, at the job's end, those
//     its retention does not keep. Since Flink 1.15 the _metadata and the state files are deleted
//     at once on an I/O pool (no order), so for a moment a file is gone while the _metadata still
//     is. Before deleting, Flink marks the checkpoint discarded in its statistics: the REST
//     history (/jobs/:id/checkpoints, history[].discarded) shows it for the newest entries.
//   - Retention at the job's end, as /jobs/:id/checkpoints/config reports it: externalization
//     enabled=false is NEVER_RETAIN_AFTER_TERMINATION (deleted on FINISHED, CANCELED, FAILED);
//     enabled with delete_on_cancellation is RETAIN_ON_FAILURE (deleted on FINISHED and CANCELED);
//     enabled without it is RETAIN_ON_CANCELLATION (deleted on FINISHED only).
//   - A savepoint disposal (POST /savepoint-disposal, the Kubernetes operator's savepoint cleanup)
//     deletes the savepoint's _metadata first, then its files. Nothing in the REST API records it
//     (the disposal's status is known only by its trigger id), so it is not judged here; the loss
//     check already counts a checkpoint whose _metadata is gone as retired, not broken.
//
// Only what Flink reports is taken: a checkpoint (never a savepoint) of the job's own folder,
// completed since the job started (this run's), of a job an endpoint reported terminated in a state
// its retention deletes on, or listed as discarded in its history. Anything else missing is a loss.

// noteCleanup records what Flink reports it deletes itself for one job.
func (f *flinkFacts) noteCleanup(ix *Index, fj flinkJob) {
	if fj.job.Terminal() {
		if _, dup := f.ended[fj.job.ID]; !dup || fj.ep.Up {
			f.ended[fj.job.ID] = fj
		}
	}
	for _, uri := range fj.job.Discarded {
		k := ix.norm.Absolute(strings.TrimSuffix(uri, "/") + "/" + flinklayout.MetadataName)
		if k.Inside {
			f.discarded[k.Path] = fj
		}
	}
}

// endRetention says whether Flink deletes a job's retained checkpoints when it ends in state, and
// the configuration that says so ("" when it keeps them or its configuration is unknown).
func endRetention(j flinkrest.Job) string {
	switch {
	case j.State == "FINISHED":
		return "every retention deletes them when a job finishes"
	case !j.ConfigKnown:
		return ""
	case !j.Externalized && (j.State == "CANCELED" || j.State == "FAILED"):
		return "its checkpoints are not externalized (externalization.enabled false: deleted at any end)"
	case j.State == "CANCELED" && j.DeleteOnCancellation:
		return "its checkpoints are deleted on cancellation (externalization.delete_on_cancellation)"
	}
	return ""
}

// expectedDeletion is why Flink itself deletes the checkpoint c, or "" when no report says so.
func (f *flinkFacts) expectedDeletion(c *checkpointRecord) string {
	if f == nil || c.Kind != "checkpoint" {
		return ""
	}
	// Only the history of the checkpoint's own job counts: another job's (a wrong or hostile
	// endpoint, another cluster) naming this path discarded must not silence a loss.
	if fj, ok := f.discarded[c.Key]; ok && fj.job.ID == path.Base(c.Job) {
		return fmt.Sprintf("Flink deletes it: the checkpoint history of job %s on %s lists %s as discarded (subsumed, or not retained at the job's end)",
			fj.job.ID, fj.ep.URL, path.Dir(c.Key))
	}
	id := path.Base(c.Job)
	// A job another endpoint reports not terminated (or holds while down) still runs: an end
	// reported elsewhere (a colliding id on another cluster) never makes its deletions expected.
	if _, live := f.live[id]; live {
		return ""
	}
	if _, held := f.held[id]; held {
		return ""
	}
	fj, ok := f.ended[id]
	if !ok || fj.job.Started.IsZero() || c.ModTime.Before(fj.job.Started) {
		return ""
	}
	j := fj.job
	why := endRetention(j)
	if why == "" {
		return ""
	}
	return fmt.Sprintf("Flink deletes it: job %s is %s on %s and %s; %s is a checkpoint of this run (completed after the job started %s)",
		id, j.State, fj.ep.URL, why, path.Dir(c.Key), j.Started.UTC().Format("2006-01-02T15:04:05Z"))
}
