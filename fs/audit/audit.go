// Package audit writes the guard's decisions as JSON lines, one record per decision, durable before the
// filesystem replies to the caller.
//
// Durability policy: every record is handed to the kernel with a single write(2) on an O_APPEND descriptor
// before Record returns, so a crash of the mount process (kill -9, panic) never loses a decision that a caller
// has seen the result of. Records are also fsync'ed: every FsyncInterval by a background flusher (default 1 s,
// bounding loss on a power failure or kernel crash to that window), or after every record when FsyncInterval is
// negative (strict, slower: one fsync per refusal/deletion). A record is never split across writes, so
// concurrent writers and a crash mid-write leave at most one truncated last line, which readers skip.
package audit

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
	"unicode/utf8"
)

// Record is one guarded decision.
type Record struct {
	Time time.Time `json:"time"`
	Op   string    `json:"op"`
	Path string    `json:"path"`
	To   string    `json:"to,omitempty"` // rename target
	// PathBytes and ToBytes hold the exact bytes of a name that is not valid UTF-8 (base64 in JSON):
	// Path and To then show U+FFFD in place of the invalid bytes, and two names could look the same.
	PathBytes   []byte   `json:"path_bytes,omitempty"`
	ToBytes     []byte   `json:"to_bytes,omitempty"`
	Decision    string   `json:"decision"` // "allow" or "refuse"; "error" for index notifications that failed
	Reason      string   `json:"reason"`
	Message     string   `json:"message,omitempty"`
	Referencing []string `json:"referencing,omitempty"`
	RefCount    int      `json:"ref_count,omitempty"`
	Errno       string   `json:"errno,omitempty"` // what the caller got back, e.g. "EPERM"
	PID         uint32   `json:"pid,omitempty"`
	UID         uint32   `json:"uid"`
	GID         uint32   `json:"gid"`
	Comm        string   `json:"comm,omitempty"`
}

// SetNames sets Path and To, and keeps the exact bytes of either that is not valid UTF-8.
func (r *Record) SetNames(p, to string) {
	r.Path, r.To = p, to
	if !utf8.ValidString(p) {
		r.PathBytes = []byte(p)
	}
	if !utf8.ValidString(to) {
		r.ToBytes = []byte(to)
	}
}

// Sink receives decisions. *Log implements it; tests may use their own. Record must not keep r (or its
// Referencing slice) after it returns: the caller reuses the record for the next decision.
type Sink interface {
	Record(r *Record) error
}

// Options configure a Log.
type Options struct {
	// FsyncInterval: >0 fsync at most this often in the background; 0 means the default (1 s); <0 fsync
	// after every record.
	FsyncInterval time.Duration
}

// Log is an append-only JSON-lines audit file.
type Log struct {
	path     string
	mu       sync.Mutex
	f        *os.File
	buf      []byte
	dirty    bool
	strict   bool
	stop     chan struct{}
	done     chan struct{}
	closeErr error
	closed   bool
}

// Open opens (creating with mode 0600) the audit log at path for appending.
func Open(path string, opts Options) (*Log, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("audit log %s: %w", path, err)
	}
	l := &Log{path: path, f: f, stop: make(chan struct{}), done: make(chan struct{})}
	interval := opts.FsyncInterval
	switch {
	case interval < 0:
		l.strict = true
		close(l.done)
	case interval == 0:
		interval = time.Second
		fallthrough
	default:
		go l.flusher(interval)
	}
	return l, nil
}

// Path is the file the log writes to.
func (l *Log) Path() string { return l.path }

// Record appends r as one JSON line with a single write(2).
func (l *Log) Record(r *Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return fmt.Errorf("audit log %s: closed", l.path)
	}
	l.buf = append(r.AppendJSON(l.buf[:0]), '\n')
	if _, err := l.f.Write(l.buf); err != nil {
		return fmt.Errorf("audit log %s: %w", l.path, err)
	}
	if l.strict {
		if err := l.f.Sync(); err != nil {
			return fmt.Errorf("audit log %s: fsync: %w", l.path, err)
		}
		return nil
	}
	l.dirty = true
	return nil
}

func (l *Log) flusher(interval time.Duration) {
	defer close(l.done)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
			l.mu.Lock()
			dirty := l.dirty && !l.closed
			l.dirty = false
			l.mu.Unlock()
			if !dirty {
				continue
			}
			// fsync without the lock: writers keep appending (write(2) and fsync(2) on one descriptor are
			// safe together), so a slow journal commit never stalls a decision. Close stops this loop
			// before it closes the file.
			if err := l.f.Sync(); err != nil {
				l.mu.Lock()
				if l.closeErr == nil {
					// Reported by Close; the records are already in the page cache.
					l.closeErr = fmt.Errorf("audit log %s: fsync: %w", l.path, err)
				}
				l.mu.Unlock()
			}
		}
	}
}

// Close fsyncs and closes the log.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.mu.Unlock()
	if !l.strict {
		close(l.stop)
	}
	<-l.done
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closed = true
	err := l.closeErr
	if serr := l.f.Sync(); serr != nil && err == nil {
		err = fmt.Errorf("audit log %s: fsync: %w", l.path, serr)
	}
	if cerr := l.f.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("audit log %s: %w", l.path, cerr)
	}
	return err
}

// ReadFile parses an audit log, skipping a truncated last line (a crash mid-write). It is used by tests and
// tools that inspect the log.
func ReadFile(path string) ([]Record, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	start := 0
	for i, c := range b {
		if c != '\n' {
			continue
		}
		line := b[start:i]
		start = i + 1
		if len(line) == 0 {
			continue
		}
		var r Record
		if err := json.Unmarshal(line, &r); err != nil {
			return out, fmt.Errorf("audit log %s: line at byte %d: %w", path, start-len(line)-1, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// AppendJSON appends r as one JSON object (the same document encoding/json produces for Record, without
// reflection: the audit record is written on the path of every guarded operation).
func (r *Record) AppendJSON(b []byte) []byte {
	b = append(b, `{"time":"`...)
	b = r.Time.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","op":`...)
	b = appendString(b, r.Op)
	b = append(b, `,"path":`...)
	b = appendString(b, r.Path)
	if r.To != "" {
		b = append(b, `,"to":`...)
		b = appendString(b, r.To)
	}
	if len(r.PathBytes) > 0 {
		b = append(b, `,"path_bytes":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.PathBytes)
		b = append(b, '"')
	}
	if len(r.ToBytes) > 0 {
		b = append(b, `,"to_bytes":"`...)
		b = base64.StdEncoding.AppendEncode(b, r.ToBytes)
		b = append(b, '"')
	}
	b = append(b, `,"decision":`...)
	b = appendString(b, r.Decision)
	b = append(b, `,"reason":`...)
	b = appendString(b, r.Reason)
	if r.Message != "" {
		b = append(b, `,"message":`...)
		b = appendString(b, r.Message)
	}
	if len(r.Referencing) > 0 {
		b = append(b, `,"referencing":[`...)
		for i, x := range r.Referencing {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, x)
		}
		b = append(b, ']')
	}
	if r.RefCount != 0 {
		b = append(b, `,"ref_count":`...)
		b = strconv.AppendInt(b, int64(r.RefCount), 10)
	}
	if r.Errno != "" {
		b = append(b, `,"errno":`...)
		b = appendString(b, r.Errno)
	}
	if r.PID != 0 {
		b = append(b, `,"pid":`...)
		b = strconv.AppendUint(b, uint64(r.PID), 10)
	}
	b = append(b, `,"uid":`...)
	b = strconv.AppendUint(b, uint64(r.UID), 10)
	b = append(b, `,"gid":`...)
	b = strconv.AppendUint(b, uint64(r.GID), 10)
	if r.Comm != "" {
		b = append(b, `,"comm":`...)
		b = appendString(b, r.Comm)
	}
	return append(b, '}')
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string. Invalid UTF-8 (file names are bytes) becomes U+FFFD, as
// encoding/json does, so every line stays valid JSON.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		// Copy the run of bytes that need no escaping in one append (file names are mostly such bytes).
		j := i
		for j < len(s) && s[j] >= 0x20 && s[j] < utf8.RuneSelf && s[j] != '"' && s[j] != '\\' {
			j++
		}
		b = append(b, s[i:j]...)
		if i = j; i == len(s) {
			break
		}
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case c == '"' || c == '\\':
				b = append(b, '\\', c)
			case c < 0x20:
				switch c {
				case '\n':
					b = append(b, '\\', 'n')
				case '\t':
					b = append(b, '\\', 't')
				case '\r':
					b = append(b, '\\', 'r')
				default:
					b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
				}
			default:
				b = append(b, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, `\ufffd`...)
		} else if r == '\u2028' || r == '\u2029' {
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
		} else {
			b = append(b, s[i:i+size]...)
		}
		i += size
	}
	return append(b, '"')
}
