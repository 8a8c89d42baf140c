package hold

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/ckguard/ckguard/internal/fsync"
)

// LedgerName is the ledger's file name in the index directory, beside the generations (like the pins
// and the S3 delete journal): a rebuild of the index keeps it. Every backend writes the same format, so
// `ckguard hold status --list` reads any.
const LedgerName = "holds.jsonl"

// maxLine bounds one ledger line (a key is at most a few KiB); a longer line is damage.
const maxLine = 16 << 10

// State is where one key stands in the ledger.
type State string

const (
	// Pending: a hold is about to be set on Version (or on the key, where the backend has no
	// versions), or was set and its answer not recorded (a crash between the request and the ledger's
	// write). The backend may hold it: it is treated as held for releasing, and the next pass holds
	// it again (idempotent).
	Pending State = "pending"
	// Held: the backend answered the hold.
	Held State = "held"
	// Releasing: a release is about to be sent, or was sent and its answer not recorded; the next
	// pass sends it again (idempotent) once the guard's rules still allow it.
	Releasing State = "releasing"
)

// Entry is one key the ledger knows of.
type Entry struct {
	Key     string    `json:"key"`
	Version string    `json:"version,omitempty"` // the held version's id ("" where the backend holds the key)
	Size    int64     `json:"size,omitempty"`
	State   State     `json:"state"`
	Since   time.Time `json:"since,omitzero"` // when the hold was answered (Held)
	// Failures counts failed attempts in a row; LastErr is the last one's error.
	Failures int    `json:"failures,omitempty"`
	LastErr  string `json:"last_err,omitempty"`

	seen uint64 // the pass that last found the key protected
}

// record is one ledger line. Op: "p" pending (intent to hold Version, on disk before the request),
// "h" held (the backend answered), "r" releasing (intent to release, on disk before the request), "x"
// released (answered, or the object is gone, or the mount lifted the hold itself: nothing is held),
// "f" a failed attempt.
type record struct {
	Op      string    `json:"op"`
	Key     string    `json:"key"`
	Version string    `json:"v,omitempty"`
	Size    int64     `json:"size,omitempty"`
	At      time.Time `json:"at,omitzero"`
	Err     string    `json:"err,omitempty"`
}

// counts are the ledger's figures, kept as entries change so that reading them is O(1): the mount's
// own changes (Engine.BeforeChange) take the ledger's lock under the enforcer's lock.
type counts struct {
	held, pending, releasing, failed int
	heldBytes                        int64
}

func (c *counts) add(e *Entry, n int) {
	switch e.State {
	case Held:
		c.held += n
		c.heldBytes += int64(n) * e.Size
	case Pending:
		c.pending += n
	case Releasing:
		c.releasing += n
	}
	if e.Failures > 0 {
		c.failed += n
	}
}

// Ledger is the record of what the mount asked its backend to hold. It is not derived data: it is a
// record of requests made to the storage (a hold stays whatever the index says), so it is kept beside
// the index generations and survives a rebuild; the rebuild re-derives only which keys should be
// held, and the next pass compares the two. A ledger lost or damaged beyond its torn last line
// forgets holds: those stay (safe: nothing is deletable that was not) until an operator releases them
// (`ckguard hold status --list` lists what the ledger knows; the operator docs say how to find every
// held object).
//
// Write-ahead: the intent ("p", "r") is on disk before the request it announces, so a crash between a
// request and the record of its answer leaves an intent that the next pass completes; the requests
// are idempotent.
//
// Every change is applied in memory and queued under mu in one step, and the queue is written to the
// file in that order (flush): the file replays to what memory held, whoever changed it (a pass, or
// the mount lifting a hold under the enforcer's lock, which does no I/O). The file itself is owned by
// one writer (the Engine's pass).
type Ledger struct {
	path string

	// file: owned by the writer (flush, compact, Close)
	f       *os.File
	w       *bufio.Writer
	lines   int
	damaged int

	mu      sync.Mutex
	entries map[string]*Entry
	queue   []record
	n       counts
	// curEpoch and seenN: how many entries the current pass found protected; while it equals
	// len(entries) no entry waits for a release and the pass scans nothing.
	curEpoch uint64
	seenN    int
}

// OpenLedger reads (or creates) the ledger in dir and compacts it: one line per entry.
func OpenLedger(dir string) (*Ledger, error) {
	l := &Ledger{path: filepath.Join(dir, LedgerName), entries: map[string]*Entry{}}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	b, err := os.ReadFile(l.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	l.replay(b)
	if err := l.compact(); err != nil {
		return nil, err
	}
	return l, nil
}

// ReadLedger reads the ledger in dir without taking it over (a running mount's ledger is read as it
// is): its entries, sorted by key.
func ReadLedger(dir string) ([]*Entry, error) {
	l := &Ledger{path: filepath.Join(dir, LedgerName), entries: map[string]*Entry{}}
	b, err := os.ReadFile(l.path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	l.replay(b)
	return l.Entries(), nil
}

// Damaged is the number of lines the open could not read (a torn last line after a crash is one).
func (l *Ledger) Damaged() int { return l.damaged }

func (l *Ledger) replay(b []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		var r record
		if len(line) > maxLine || json.Unmarshal(line, &r) != nil || r.Key == "" {
			l.damaged++
			continue
		}
		l.change(r)
	}
	l.queue = nil
}

// change applies r to the entries and queues it for the file (mu held).
func (l *Ledger) change(r record) {
	l.queue = append(l.queue, r)
	e := l.entries[r.Key]
	if e != nil {
		l.n.add(e, -1)
	}
	switch r.Op {
	case "p":
		if e == nil {
			e = &Entry{Key: r.Key}
			l.entries[r.Key] = e
		}
		e.Version, e.Size, e.State = r.Version, r.Size, Pending
	case "h":
		if e == nil {
			e = &Entry{Key: r.Key}
			l.entries[r.Key] = e
		}
		e.Version, e.Size, e.State, e.Since, e.Failures, e.LastErr = r.Version, r.Size, Held, r.At, 0, ""
	case "r":
		if e != nil {
			e.State = Releasing
		}
	case "x":
		if e != nil && (r.Version == "" || r.Version == e.Version) {
			if e.seen == l.curEpoch && l.curEpoch != 0 {
				l.seenN--
			}
			delete(l.entries, r.Key)
			e = nil
		}
	case "f":
		if e != nil {
			e.Failures++
			e.LastErr = r.Err
		}
	}
	if e != nil {
		l.n.add(e, 1)
	}
}

// apply applies records in memory and queues them for the file, in one step.
func (l *Ledger) apply(rs ...record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, r := range rs {
		l.change(r)
	}
}

// flush writes the queued records in the order they were applied; with sync they are on disk when it
// returns (intents must be, before their requests go out). Only the file's writer calls it.
func (l *Ledger) flush(sync bool) error {
	l.mu.Lock()
	q := l.queue
	l.queue = nil
	n := len(l.entries)
	l.mu.Unlock()
	if len(q) == 0 && !sync {
		return nil
	}
	if l.f == nil {
		return fmt.Errorf("hold ledger %s: closed", l.path)
	}
	for _, r := range q {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := l.w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("hold ledger %s: %w", l.path, err)
		}
		l.lines++
	}
	if err := l.w.Flush(); err != nil {
		return fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	if sync {
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("hold ledger %s: %w", l.path, err)
		}
	}
	if l.lines > 2*n+10000 {
		return l.compact()
	}
	return nil
}

// compact rewrites the file with one line per entry (atomically: a crash leaves the old or the new).
// The entries are read and the queue emptied in one step: what is applied later is queued for the
// new file.
func (l *Ledger) compact() error {
	if l.f != nil {
		if err := l.w.Flush(); err != nil {
			return fmt.Errorf("hold ledger %s: %w", l.path, err)
		}
		_ = l.f.Close()
		l.f = nil
	}
	l.mu.Lock()
	es := l.sorted()
	var rs []record
	for _, e := range es {
		rs = append(rs, entryRecords(e)...)
	}
	l.queue = nil
	l.mu.Unlock()
	tmp := l.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	w := bufio.NewWriter(f)
	for _, r := range rs {
		b, _ := json.Marshal(r)
		_, _ = w.Write(append(b, '\n'))
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, l.path)
	}
	if err == nil {
		err = fsync.Dir(filepath.Dir(l.path))
	}
	if err != nil {
		return fmt.Errorf("hold ledger %s: compact: %w", l.path, err)
	}
	l.lines = len(rs)
	l.f, err = os.OpenFile(l.path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	l.w = bufio.NewWriter(l.f)
	return nil
}

// entryRecords are the lines that replay to e (its failures are not kept: a new open retries afresh).
func entryRecords(e Entry) []record {
	switch e.State {
	case Held:
		return []record{{Op: "h", Key: e.Key, Version: e.Version, Size: e.Size, At: e.Since}}
	case Releasing:
		return []record{{Op: "h", Key: e.Key, Version: e.Version, Size: e.Size, At: e.Since}, {Op: "r", Key: e.Key}}
	default:
		return []record{{Op: "p", Key: e.Key, Version: e.Version, Size: e.Size}}
	}
}

// Get returns a copy of key's entry (false: the ledger holds nothing for it).
func (l *Ledger) Get(key string) (Entry, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e, ok := l.entries[key]
	if !ok {
		return Entry{}, false
	}
	return *e, true
}

// Len is the number of entries.
func (l *Ledger) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.entries)
}

// Entries returns a copy of every entry, sorted by key.
func (l *Ledger) Entries() []*Entry {
	l.mu.Lock()
	es := l.sorted()
	l.mu.Unlock()
	out := make([]*Entry, len(es))
	for i := range es {
		out[i] = &es[i]
	}
	return out
}

// sorted copies the entries in key order (mu held).
func (l *Ledger) sorted() []Entry {
	out := make([]Entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Close writes what is queued and closes the file.
func (l *Ledger) Close() error {
	if l.f == nil {
		return nil
	}
	err := l.flush(false)
	if ferr := l.w.Flush(); err == nil {
		err = ferr
	}
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
}
