package deleteq

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"
	"unicode/utf8"

	"github.com/ckguard/ckguard/internal/fsync"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// JournalName is the journal's file name in the index directory.
const JournalName = "deletes.jsonl"

// maxLine bounds one journal line: an S3 key is at most 1,024 bytes, a record with it and its error text
// stays far below. A longer line is damage and is skipped, never buffered.
const maxLine = 16 << 10

// record is one journal line. Op: "q" queued (with the object decided on), "a" applied, "k" kept (refused
// when it was applied, or refused by the server for good), "s" skipped (the object was replaced or removed
// beside the mount: nothing of ours was left to delete), "f" a failed attempt (Err).
type record struct {
	Op      string    `json:"op"`
	ID      uint64    `json:"id"`
	Key     string    `json:"key,omitempty"`
	ETag    string    `json:"etag,omitempty"`
	Size    int64     `json:"size,omitempty"`
	ModTime time.Time `json:"mtime,omitzero"`
	At      time.Time `json:"at,omitzero"`
	Err     string    `json:"err,omitempty"`
	// Who is the record of the deletion a quarantine keeps with the staged object (who asked; "q" only).
	Who quarantine.Decision `json:"who,omitzero"`
}

// Entry is one acknowledged deletion: the object the decision judged, and its progress.
type Entry struct {
	ID       uint64
	Key      string
	ETag     string
	Size     int64
	ModTime  time.Time
	Queued   time.Time
	Attempts int    // failed attempts so far
	LastErr  string // the last failure
	// Who asked for the deletion (the caller the mount saw): a quarantine records it with the staged
	// object, however late the queue applies it. Zero in journals written before it was kept.
	Who quarantine.Decision
}

// Replay is what a journal says: the deletions still pending (acknowledged, not applied), in queue order,
// and how many lines could not be read.
type Replay struct {
	Pending  []Entry
	NextID   uint64
	Damaged  int    // lines that are not records (a torn last line after a crash is one)
	FirstBad string // the first of them, shortened, for the log
}

// Parse reads a journal. It never fails on content: a line that is not a record is counted in Damaged
// and skipped, so one damaged line cannot hide the acknowledged deletions after it.
func Parse(r io.Reader) (Replay, error) {
	var out Replay
	pending := map[uint64]*Entry{}
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, tooLong, err := readLine(br)
		if len(line) > 0 || tooLong {
			if rec, ok := decode(line, tooLong); ok {
				apply(pending, rec)
				out.NextID = max(out.NextID, rec.ID+1)
			} else {
				out.Damaged++
				if out.FirstBad == "" {
					out.FirstBad = shorten(line)
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return Replay{}, err
		}
	}
	for _, e := range pending {
		out.Pending = append(out.Pending, *e)
	}
	sort.Slice(out.Pending, func(i, j int) bool { return out.Pending[i].ID < out.Pending[j].ID })
	return out, nil
}

// readLine returns the next line without its newline; a line longer than maxLine is consumed and
// reported with tooLong (its content dropped).
func readLine(br *bufio.Reader) (line []byte, tooLong bool, err error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if !tooLong {
			if len(buf)+len(chunk) > maxLine+1 {
				tooLong, buf = true, nil
			} else {
				buf = append(buf, chunk...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(buf, []byte("\n")), tooLong, err
	}
}

func decode(line []byte, tooLong bool) (record, bool) {
	var rec record
	if tooLong || json.Unmarshal(line, &rec) != nil {
		return record{}, false
	}
	switch rec.Op {
	case "q":
		if rec.Key == "" || !utf8.ValidString(rec.Key) {
			return record{}, false
		}
	case "a", "k", "s", "f":
	default:
		return record{}, false
	}
	return rec, rec.ID < 1<<62
}

func apply(pending map[uint64]*Entry, rec record) {
	switch rec.Op {
	case "q":
		pending[rec.ID] = &Entry{ID: rec.ID, Key: rec.Key, ETag: rec.ETag, Size: rec.Size, ModTime: rec.ModTime, Queued: rec.At, Who: rec.Who}
	case "f":
		if e := pending[rec.ID]; e != nil {
			e.Attempts++
			e.LastErr = rec.Err
		}
	default:
		delete(pending, rec.ID)
	}
}

func shorten(b []byte) string {
	if len(b) > 120 {
		b = b[:120]
	}
	return string(bytes.ToValidUTF8(b, []byte("?")))
}

// ReadJournal parses the journal in the index directory dir (no journal: nothing pending). It takes no
// lock: the CLI reads a running mount's journal; a line being written is at worst one damaged line.
func ReadJournal(dir string) (Replay, error) {
	f, err := os.Open(filepath.Join(dir, JournalName))
	if errors.Is(err, os.ErrNotExist) {
		return Replay{}, nil
	}
	if err != nil {
		return Replay{}, fmt.Errorf("delete queue journal: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// journal appends records to the file, one write(2) each: a record the kernel has is kept when the
// process is killed (the page cache survives it); Sync makes it survive a power loss too.
type journal struct {
	dir  string
	f    *os.File
	size int64
	buf  []byte
}

func openJournal(dir string) (*journal, Replay, error) {
	rp, err := ReadJournal(dir)
	if err != nil {
		return nil, Replay{}, err
	}
	j := &journal{dir: dir}
	// Start from a compact file holding only what is pending: replaces the old one atomically, so a
	// crash during it leaves one or the other.
	if err := j.rewrite(rp.Pending); err != nil {
		return nil, Replay{}, err
	}
	return j, rp, nil
}

func (j *journal) append(rec record) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	j.buf = append(append(j.buf[:0], b...), '\n')
	n, err := j.f.Write(j.buf)
	j.size += int64(n)
	if err != nil {
		return fmt.Errorf("delete queue journal %s: %w", j.f.Name(), err)
	}
	return nil
}

func (j *journal) truncate() error {
	if err := j.f.Truncate(0); err != nil {
		return fmt.Errorf("delete queue journal %s: %w", j.f.Name(), err)
	}
	j.size = 0
	return nil
}

// rewrite replaces the journal with one "q" record per pending entry (and their attempts).
func (j *journal) rewrite(pending []Entry) error {
	tmp := filepath.Join(j.dir, JournalName+".tmp")
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("delete queue journal: %w", err)
	}
	w := bufio.NewWriter(f)
	var size int64
	for _, e := range pending {
		recs := []record{{Op: "q", ID: e.ID, Key: e.Key, ETag: e.ETag, Size: e.Size, ModTime: e.ModTime, At: e.Queued, Who: e.Who}}
		for i := 0; i < e.Attempts; i++ {
			recs = append(recs, record{Op: "f", ID: e.ID, Err: e.LastErr})
		}
		for _, r := range recs {
			b, _ := json.Marshal(r)
			b = append(b, '\n')
			size += int64(len(b))
			if _, err := w.Write(b); err != nil {
				f.Close()
				return fmt.Errorf("delete queue journal: %w", err)
			}
		}
	}
	err = w.Flush()
	if err == nil {
		err = f.Sync()
	}
	if err != nil {
		f.Close()
		return fmt.Errorf("delete queue journal: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("delete queue journal: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(j.dir, JournalName)); err != nil {
		return fmt.Errorf("delete queue journal: %w", err)
	}
	_ = fsync.Dir(j.dir)
	nf, err := os.OpenFile(filepath.Join(j.dir, JournalName), os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("delete queue journal: %w", err)
	}
	if j.f != nil {
		j.f.Close()
	}
	j.f, j.size = nf, size
	return nil
}

func (j *journal) close() error {
	if j.f == nil {
		return nil
	}
	err := j.f.Sync()
	if cerr := j.f.Close(); err == nil {
		err = cerr
	}
	j.f = nil
	return err
}
