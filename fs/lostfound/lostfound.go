// Package lostfound brings back referenced objects that were deleted beside the mount, from what the
// storage itself kept: the versions of a versioned S3 bucket (s3backend/s3lost), the snapshots of an
// HDFS store root (hdfsbackend/hdfssnap). It is what `ckguard restore-lost` and `verify` share.
//
// Invariants:
//   - Nothing is ever replaced: a key that reads again (someone wrote it back) is not restored, and a
//     source restores only when the key is still absent at the time of the request (a delete marker is
//     still its latest version; the file is still absent).
//   - Only what the loss check (the index's Verify) names as missing for a live checkpoint is looked
//     up; nothing is restored that no live checkpoint references.
//   - Every restore, and every failed one, is audited before Apply returns.
package lostfound

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/ckguard/ckguard/fs/audit"
	"github.com/ckguard/ckguard/refindex"
)

// Candidate is where one missing key can be brought back from.
type Candidate struct {
	Key string `json:"path"`
	// Restorable: a source holds a copy it can bring back; Reason says why not otherwise.
	Restorable bool   `json:"restorable"`
	Reason     string `json:"reason,omitempty"`
	// Present: the key reads again (nothing to do).
	Present bool `json:"present,omitempty"`
	// From names the copy: "version 3HL4kqtJ…" or "snapshot ckguard-20261207T110000Z".
	From    string    `json:"from,omitempty"`
	Version string    `json:"version,omitempty"` // S3 version id, or the HDFS snapshot name
	Size    int64     `json:"size"`
	ModTime time.Time `json:"mod_time,omitzero"`
	// Method is how Restore brings it back: "remove-delete-markers" (the same version current again),
	// "copy-version" (a copy of that version put at the key), "copy-from-snapshot".
	Method string `json:"method,omitempty"`
	// Markers are the S3 delete markers above the version (removed by Restore).
	Markers []string `json:"delete_markers,omitempty"`
	// Older counts further non-deleted versions below the chosen one (the newest is taken).
	Older int `json:"older_versions,omitempty"`
}

// Describe is the one-line text of a candidate.
func (c Candidate) Describe() string {
	switch {
	case c.Present:
		return "reads again (nothing to restore)"
	case !c.Restorable:
		return "NOT restorable: " + c.Reason
	}
	s := fmt.Sprintf("%s (%d bytes, %s)", c.From, c.Size, c.ModTime.UTC().Format(time.RFC3339))
	switch c.Method {
	case MethodRemoveMarkers:
		s += fmt.Sprintf(", by removing %d delete marker(s)", len(c.Markers))
	case MethodCopyVersion:
		s += ", by copying that version back"
	case MethodCopySnapshot:
		s += ", by copying it back from the snapshot"
	}
	if c.Older > 0 {
		s += fmt.Sprintf("; %d older version(s) below it left as they are", c.Older)
	}
	return s
}

// Methods of Candidate.
const (
	MethodRemoveMarkers = "remove-delete-markers"
	MethodCopyVersion   = "copy-version"
	MethodCopySnapshot  = "copy-from-snapshot"
)

// Source is a store's memory of deleted objects.
type Source interface {
	// Name says what the source is, for messages ("versions of s3://bucket/prefix").
	Name() string
	// Find says where key can be brought back from. It sends only read requests.
	Find(ctx context.Context, key string) (Candidate, error)
	// Restore brings c back at its key, never replacing an object written there since Find; it
	// returns the method it used (a source may fall back, e.g. to a copy when markers cannot be
	// removed).
	Restore(ctx context.Context, c Candidate) (method string, err error)
}

// Lost is one missing key and the live checkpoints (store keys of their `_metadata`) that reference it.
type Lost struct {
	Key         string   `json:"path"`
	Checkpoints []string `json:"checkpoints"`
}

// Missing collects the distinct missing keys of a Verify answer, each with its checkpoints, sorted.
// truncated is set when a checkpoint's list was cut (Verify names at most 1,000 per checkpoint): the
// rest are found after these are restored.
func Missing(v *refindex.VerifyResult) (lost []Lost, truncated bool) {
	by := map[string]*Lost{}
	for _, b := range v.Broken {
		if b.Error != "" {
			continue
		}
		if b.MissingCount > len(b.Missing) {
			truncated = true
		}
		for _, m := range b.Missing {
			l := by[m]
			if l == nil {
				l = &Lost{Key: m}
				by[m] = l
			}
			l.Checkpoints = append(l.Checkpoints, b.Metadata)
		}
	}
	for _, l := range by {
		sort.Strings(l.Checkpoints)
		lost = append(lost, *l)
	}
	sort.Slice(lost, func(i, j int) bool { return lost[i].Key < lost[j].Key })
	return lost, truncated
}

// Item is one lost key with its candidate (or the error of looking it up).
type Item struct {
	Lost
	Candidate Candidate `json:"candidate"`
	Err       string    `json:"error,omitempty"`
	// Restored: Apply brought it back with Method; Failed: Apply tried and failed (Err says why).
	Restored bool   `json:"restored,omitempty"`
	Method   string `json:"method,omitempty"`
	Failed   bool   `json:"failed,omitempty"`
}

// Plan looks every lost key up in src (read requests only).
func Plan(ctx context.Context, src Source, lost []Lost) []Item {
	items := make([]Item, len(lost))
	for i, l := range lost {
		items[i].Lost = l
		c, err := src.Find(ctx, l.Key)
		if err != nil {
			items[i].Err = err.Error()
			continue
		}
		items[i].Candidate = c
	}
	return items
}

// Audit vocabulary of a restore.
const (
	AuditOp         = "restore-lost"
	AuditRestored   = "restored"
	AuditFailed     = "error"
	AuditReasonDone = "restored-from-storage"
	AuditReasonFail = "restore-failed"
)

// Apply restores every restorable item, each audited (restored or failed) before the next. It returns
// the first audit error: without its record a restore is not done silently.
func Apply(ctx context.Context, src Source, items []Item, sink audit.Sink, now func() time.Time) error {
	for i := range items {
		it := &items[i]
		if it.Err != "" || !it.Candidate.Restorable || it.Candidate.Present {
			continue
		}
		method, err := src.Restore(ctx, it.Candidate)
		rec := audit.Record{Time: now(), Op: AuditOp, Referencing: it.Checkpoints, RefCount: len(it.Checkpoints)}
		rec.SetNames(it.Key, "")
		if err != nil {
			it.Failed, it.Err = true, err.Error()
			rec.Decision, rec.Reason = AuditFailed, AuditReasonFail
			rec.Message = fmt.Sprintf("referenced object %s (live checkpoints %s) not restored from %s: %v", it.Key, strings.Join(it.Checkpoints, ", "), src.Name(), err)
		} else {
			it.Restored, it.Method = true, method
			rec.Decision, rec.Reason = AuditRestored, AuditReasonDone
			rec.Message = fmt.Sprintf("referenced object %s (live checkpoints %s), deleted beside the mount, restored from %s: %s (%s)", it.Key, strings.Join(it.Checkpoints, ", "), src.Name(), it.Candidate.From, method)
		}
		if sink != nil {
			if aerr := sink.Record(&rec); aerr != nil {
				return fmt.Errorf("audit record of the restore of %s: %w (stopped: no restore goes unrecorded)", it.Key, aerr)
			}
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	return nil
}
