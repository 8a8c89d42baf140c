package s3hold

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
	"time"
)

// LedgerName is the ledger's file name in the index directory, beside the generations (like the pins
// and the S3 delete journal): a rebuild of the index keeps it.
const LedgerName = "holds.jsonl"

// maxLine bounds one ledger line (an S3 key is at most 1,024 bytes); a longer line is damage.
const maxLine = 16 << 10

// State is where one key stands in the ledger.
type State string

const (
	// Pending: a hold ON is about to be sent for Version, or was sent and its answer not recorded (a
	// crash between the request and the ledger's write). The server may hold the version: it is
	// treated as held for releasing, and the next pass sends ON again (idempotent).
	Pending State = "pending"
	// Held: the server answered the hold ON for Version.
	Held State = "held"
	// Releasing: a hold OFF is about to be sent, or was sent and its answer not recorded; the next pass
	// sends OFF again (idempotent) once the guard's rules still allow it.
	Releasing State = "releasing"
)

// Entry is one key the ledger knows of.
type Entry struct {
	Key     string    `json:"key"`
	Version string    `json:"version,omitempty"` // the held version's id
	Size    int64     `json:"size,omitempty"`
	State   State     `json:"state"`
	Since   time.Time `json:"since,omitzero"` // when the hold was answered (Held)
	// Failures counts failed attempts in a row; LastErr is the last one's error.
	Failures int    `json:"failures,omitempty"`
	LastErr  string `json:"last_err,omitempty"`

	seen uint64 // the reconciliation pass that last found the key protected
}

// record is one ledger line. Op: "p" pending (intent to hold Version, written and synced before the
// request), "h" held (the server answered ON), "r" releasing (intent to send OFF, before the request),
// "x" released (the server answered OFF, or the version is gone: nothing is held), "f" a failed attempt.
type record struct {
	Op      string    `json:"op"`
	Key     string    `json:"key"`
	Version string    `json:"v,omitempty"`
	Size    int64     `json:"size,omitempty"`
	At      time.Time `json:"at,omitzero"`
	Err     string    `json:"err,omitempty"`
}

// Ledger is the record of what the mount asked the server to hold. It is not derived data: it is a
// record of requests made to the server (a hold stays on the server whatever the index says), so it is
// kept beside the index generations and survives a rebuild; the index's rebuild re-derives only which
// keys should be held, and the next reconciliation compares the two. A ledger lost or damaged beyond
// its torn last line forgets holds: those stay on the server (safe: nothing is deletable that was not)
// until an operator releases them (`ckguard hold status` lists what the ledger knows; see the operator
// docs for the aws command that finds every held version).
//
// Write-ahead: the intent ("p", "r") is on disk before the request it announces, so a crash between a
// request and the record of its answer leaves an intent that the next pass completes; the calls are
// idempotent on the server. Not safe for concurrent use (one reconciler owns it).
type Ledger struct {
	path    string
	f       *os.File
	w       *bufio.Writer
	entries map[string]*Entry
	lines   int // lines in the file (compaction when far above len(entries))
	damaged int
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

// Damaged is the number of lines the last open could not read (a torn last line after a crash is one).
func (l *Ledger) Damaged() int { return l.damaged }

func (l *Ledger) replay(b []byte) {
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
		l.apply(r)
	}
}

// apply changes the in-memory entries as record r says.
func (l *Ledger) apply(r record) {
	e := l.entries[r.Key]
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
			delete(l.entries, r.Key)
		}
	case "f":
		if e != nil {
			e.Failures++
			e.LastErr = r.Err
		}
	}
}

// compact rewrites the file with one line per entry (atomically: a crash leaves the old or the new).
func (l *Ledger) compact() error {
	if l.f != nil {
		if err := l.w.Flush(); err != nil {
			return fmt.Errorf("hold ledger %s: %w", l.path, err)
		}
		_ = l.f.Close()
		l.f = nil
	}
	tmp := l.path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	w := bufio.NewWriter(f)
	for _, e := range l.Entries() {
		for _, r := range entryRecords(e) {
			b, _ := json.Marshal(r)
			_, _ = w.Write(append(b, '\n'))
		}
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
		err = syncDir(filepath.Dir(l.path))
	}
	if err != nil {
		return fmt.Errorf("hold ledger %s: compact: %w", l.path, err)
	}
	l.lines = len(l.entries)
	l.f, err = os.OpenFile(l.path, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("hold ledger %s: %w", l.path, err)
	}
	l.w = bufio.NewWriter(l.f)
	return nil
}

// entryRecords are the lines that replay to e.
func entryRecords(e *Entry) []record {
	switch e.State {
	case Held:
		return []record{{Op: "h", Key: e.Key, Version: e.Version, Size: e.Size, At: e.Since}}
	case Releasing:
		return []record{{Op: "h", Key: e.Key, Version: e.Version, Size: e.Size, At: e.Since}, {Op: "r", Key: e.Key}}
	default:
		return []record{{Op: "p", Key: e.Key, Version: e.Version, Size: e.Size}}
	}
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// Write appends records and applies them; with sync they are on disk when it returns (intents must be,
// before their requests go out).
func (l *Ledger) write(sync bool, rs ...record) error {
	for _, r := range rs {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := l.w.Write(append(b, '\n')); err != nil {
			return fmt.Errorf("hold ledger %s: %w", l.path, err)
		}
		l.apply(r)
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
	if l.lines > 2*len(l.entries)+10000 {
		return l.compact()
	}
	return nil
}

// Get returns the entry of key (nil: the ledger holds nothing for it).
func (l *Ledger) Get(key string) *Entry { return l.entries[key] }

// Len is the number of entries.
func (l *Ledger) Len() int { return len(l.entries) }

// Entries returns every entry, sorted by key.
func (l *Ledger) Entries() []*Entry {
	out := make([]*Entry, 0, len(l.entries))
	for _, e := range l.entries {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Close flushes and closes the file.
func (l *Ledger) Close() error {
	if l.f == nil {
		return nil
	}
	err := l.w.Flush()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.f = nil
	return err
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
