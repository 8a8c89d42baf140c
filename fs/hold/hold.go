// Package hold is the guard's second line of defence outside the mount, whatever the backend: every
// object a live checkpoint or savepoint references, and every live `_metadata`, is held by the
// storage itself (an S3 legal hold, the local immutable flag) so no client beside the mount can
// destroy it, and released once the guard's own rules would let it be deleted. The Engine runs the
// ledger of held objects (Ledger) and the pass that holds new references and releases what is
// deletable; a backend gives only its Primitive (s3backend/s3hold, localbackend/localhold). HDFS snapshots are
// another shape (a snapshot of the whole tree, not a hold per object) and live in their backend.
//
// # When a reference is held
//
// Holds follow the index: after each successful sync a pass (Engine.Pass) compares the keys the index
// counts as protected (refindex.Index.ProtectedKeys) with the ledger and holds the missing ones. So a
// reference is held at the latest one pass after the sync that learned it. Until then the mount's own
// decision protects it (a deletion through the mount is refused from the moment the sync commits, and
// a young unreferenced file is protected for --grace before it); what the window leaves open is a
// deletion beside the mount in that time, which the loss check reports as before. The mount's
// decisions never wait for a hold.
//
// # When a hold is released
//
// A held key the index no longer counts as protected is judged by the index's own decision for an
// unlink (no live reference, not pinned, past grace, index fresh): only when it allows the deletion
// is the hold released. A stale or failed index refuses, so holds stay while the index cannot judge.
// Where the hold also stops the mount itself (the immutable flag: Options.Lifted), the enforcer calls
// BeforeChange under its lock for every path of an allowed change and the hold is lifted there.
//
// # Crash safety
//
// The Ledger is written ahead of every request; holds and releases are idempotent, so a pass after a
// crash completes what the crashed one began.
package hold

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Modes of --hold.
const (
	ModeOff        = "off"
	ModeBestEffort = "best-effort"
	ModeRequired   = "required"
)

// ParseMode checks a --hold value ("" is off).
func ParseMode(s string) (string, error) {
	switch s {
	case "", ModeOff:
		return ModeOff, nil
	case ModeBestEffort, ModeRequired:
		return s, nil
	}
	return "", fmt.Errorf("--hold %q: want off, best-effort or required", s)
}

// Status is what `ckguard hold status` and `stats` show.
type Status struct {
	Mode   string `json:"mode"`
	Active bool   `json:"active"`
	Note   string `json:"note,omitempty"`
	// Held: keys the backend answered the hold for; HeldBytes their sizes.
	Held      int   `json:"held_objects"`
	HeldBytes int64 `json:"held_bytes"`
	// Pending: keys whose hold was announced and not answered yet (or failed and retried);
	// Releasing the same for release.
	Pending   int `json:"pending"`
	Releasing int `json:"releasing"`
	// Failed: keys whose last hold or release attempt failed, or whose object could not be read to
	// hold it (they are retried every pass).
	Failed int `json:"failed"`
	// Kept: held keys no longer referenced that the guard's rules still protect (grace, pins, a stale
	// index); Directories: file-merging directory handles, which no hold covers.
	Kept        int       `json:"kept"`
	Directories int       `json:"unheld_directories"`
	Healed      int64     `json:"healed_total"`
	LastPass    time.Time `json:"last_pass,omitzero"`
	LastTook    string    `json:"last_took,omitempty"`
	LastErr     string    `json:"last_error,omitempty"`
	Requests    int64     `json:"requests_total"`
}

// StatusName is the file in the index directory the mount writes its Status to after every pass:
// `ckguard hold status` and `ckguard stats` read it.
const StatusName = "holds-status.json"

// WriteStatus writes s to dir's StatusName (atomically).
func WriteStatus(dir string, s Status) error {
	b, _ := json.MarshalIndent(s, "", "  ")
	tmp := filepath.Join(dir, StatusName+".tmp")
	if err := os.WriteFile(tmp, append(b, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, StatusName))
}

// ReadStatus reads what a mount wrote in dir (os.ErrNotExist: no mount with --hold wrote one).
func ReadStatus(dir string) (Status, error) {
	var s Status
	b, err := os.ReadFile(filepath.Join(dir, StatusName))
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", filepath.Join(dir, StatusName), err)
	}
	return s, nil
}

// Register adds the holds' gauges to reg, read from e's Status at every scrape; what names the held
// things in the help texts ("objects whose current version has an S3 legal hold", "files with
// FS_IMMUTABLE_FL").
func Register(reg prometheus.Registerer, e *Engine, what string) error {
	g := func(opts prometheus.GaugeOpts, f func(Status) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(opts, func() float64 { return f(e.Status()) })
	}
	cs := []prometheus.Collector{
		g(prometheus.GaugeOpts{Name: "ckguard_hold_active", Help: "1 when holds are applied (--hold on a store that has them: " + what + "), 0 when --hold best-effort runs without them."},
			func(s Status) float64 {
				if s.Active {
					return 1
				}
				return 0
			}),
		g(prometheus.GaugeOpts{Name: "ckguard_held_objects", Help: "Objects the mount holds (" + what + ")."}, func(s Status) float64 { return float64(s.Held) }),
		g(prometheus.GaugeOpts{Name: "ckguard_held_bytes", Help: "Bytes of the objects the mount holds."}, func(s Status) float64 { return float64(s.HeldBytes) }),
		g(prometheus.GaugeOpts{Name: "ckguard_holds_pending", Help: "Protected objects whose hold (or release) was announced and not answered yet."}, func(s Status) float64 { return float64(s.Pending + s.Releasing) }),
		g(prometheus.GaugeOpts{Name: "ckguard_holds_failed", Help: "Objects whose last hold or release attempt failed (retried every pass)."}, func(s Status) float64 { return float64(s.Failed) }),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}
