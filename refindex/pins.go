package refindex

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
)

// Pins are the one piece of state that is not derived from the store: they are the operator's
// decision. They live in pins.json beside the generations, so a rebuild keeps them.
const pinsFile = "pins.json"

type pinsDoc struct {
	Pins map[string]time.Time `json:"pins"`
}

func (ix *Index) loadPins() error {
	p, err := ix.readPinsFile()
	if err != nil {
		return err
	}
	ix.mu.pins = p
	return nil
}

// readPinsFile reads pins.json (an empty map when there is none).
func (ix *Index) readPinsFile() (map[string]time.Time, error) {
	b, err := os.ReadFile(filepath.Join(ix.dir, pinsFile))
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]time.Time{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read pins: %w", err)
	}
	var d pinsDoc
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Errorf("%s: %w (fix or remove the file; it holds `ckguard pin` decisions)", filepath.Join(ix.dir, pinsFile), err)
	}
	if d.Pins == nil {
		d.Pins = map[string]time.Time{}
	}
	return d.Pins, nil
}

func (ix *Index) savePins(p map[string]time.Time) error {
	b, _ := json.MarshalIndent(pinsDoc{Pins: p}, "", "  ")
	return writeFileAtomic(ix.dir, pinsFile, b)
}

// PinResult is the answer of Pin and Unpin.
type PinResult struct {
	Checkpoint string    `json:"checkpoint"` // the pinned _metadata key
	Pinned     bool      `json:"pinned"`
	Since      time.Time `json:"since,omitzero"`
}

// pinKey resolves a checkpoint directory or its _metadata to the _metadata key.
func (ix *Index) pinKey(ctx context.Context, p string) (string, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return "", err
	}
	if flinklayout.IsMetadata(key) {
		return key, nil
	}
	mk := flinklayout.MetadataName
	if key != "" {
		mk = key + "/" + flinklayout.MetadataName
	}
	if _, err := ix.st.Stat(ctx, mk); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s is not a checkpoint or savepoint (no %s): pin a chk-N or savepoint-… directory or its _metadata", p, mk)
		}
		return "", err
	}
	return mk, nil
}

// Pin protects a checkpoint or savepoint (its directory or _metadata) from retirement until Unpin.
func (ix *Index) Pin(ctx context.Context, p string) (*PinResult, error) {
	key, err := ix.pinKey(ctx, p)
	if err != nil {
		return nil, err
	}
	var shared time.Time
	if src := ix.opt.sharedPins; src != nil {
		// The shared area is the pins' truth: written first (outside writeMu: it is a network
		// request), then this index's copy (the next sync loads it anyway).
		if shared, err = src.Set(ctx, key, true, ""); err != nil {
			return nil, fmt.Errorf("pin %s: %w", key, err)
		}
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	next := make(map[string]time.Time, len(ix.mu.pins)+1)
	for k, v := range ix.mu.pins {
		next[k] = v
	}
	ix.mu.RUnlock()
	since, ok := next[key]
	if ix.opt.sharedPins != nil {
		since, ok = shared, false
	}
	if !ok {
		if since.IsZero() {
			since = time.Now().UTC().Truncate(time.Second)
		}
		next[key] = since
		if ix.opt.sharedPins == nil {
			if err := ix.savePins(next); err != nil {
				return nil, fmt.Errorf("pin %s: %w", key, err)
			}
		}
		ix.mu.Lock()
		ix.mu.pins = next
		ix.protChanges.Add(1)
		ix.mu.shared.seq++
		ix.mu.Unlock()
	}
	return &PinResult{Checkpoint: key, Pinned: true, Since: since}, nil
}

// Unpin removes a pin.
func (ix *Index) Unpin(ctx context.Context, p string) (*PinResult, error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return nil, err
	}
	if !flinklayout.IsMetadata(key) {
		key = filepath.ToSlash(filepath.Join(key, flinklayout.MetadataName))
	}
	if src := ix.opt.sharedPins; src != nil {
		if _, err := src.Set(ctx, key, false, ""); err != nil {
			return nil, fmt.Errorf("unpin %s: %w", key, err)
		}
	}
	ix.writeMu.Lock()
	defer ix.writeMu.Unlock()
	ix.mu.RLock()
	_, ok := ix.mu.pins[key]
	next := make(map[string]time.Time, len(ix.mu.pins))
	for k, v := range ix.mu.pins {
		if k != key {
			next[k] = v
		}
	}
	ix.mu.RUnlock()
	if ix.opt.sharedPins != nil {
		ix.mu.Lock()
		ix.mu.pins = next
		ix.mu.shared.seq++
		ix.mu.Unlock()
		return &PinResult{Checkpoint: key, Pinned: false}, nil
	}
	if !ok {
		// Idempotent, as Pin is: the state asked for (not pinned) holds, so a retried or scripted unpin
		// succeeds.
		return &PinResult{Checkpoint: key, Pinned: false}, nil
	}
	if err := ix.savePins(next); err != nil {
		return nil, fmt.Errorf("unpin %s: %w", key, err)
	}
	ix.mu.Lock()
	ix.mu.pins = next
	ix.protChanges.Add(1)
	ix.mu.Unlock()
	return &PinResult{Checkpoint: key, Pinned: false}, nil
}
