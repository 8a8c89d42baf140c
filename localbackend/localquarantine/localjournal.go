package localquarantine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/store/quarantine"
)

// writeRecord appends e's record to the journal with one write(2).
func (l *Local) writeRecord(e quarantine.Entry) error {
	b, err := json.Marshal(e)
	if err != nil {
		return err
	}
	l.recMu.Lock()
	defer l.recMu.Unlock()
	if _, err := l.journal.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("write the quarantine record for /%s: %w", e.Path, err)
	}
	l.recs[e.ID] = e
	return nil
}

// records reads the journal: every well-formed record by id (the last one wins), and how many lines
// were not records (a line torn by a crash, or not ckguard's, is skipped).
func (l *Local) records() (map[string]quarantine.Entry, int, error) {
	fd, err := unix.Openat(l.dir, JournalName, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, fmt.Errorf("read the quarantine journal: %w", err)
	}
	f := os.NewFile(uintptr(fd), JournalName)
	defer f.Close()
	return parseJournal(f)
}

// parseJournal reads JSON-lines records from r; a line longer than MaxRecord or not a record is
// skipped and counted.
func parseJournal(r io.Reader) (map[string]quarantine.Entry, int, error) {
	recs := map[string]quarantine.Entry{}
	bad := 0
	br := bufio.NewReaderSize(r, 64<<10)
	for {
		line, long, err := readLine(br)
		if long {
			bad++
		} else if len(line) > 0 {
			var e quarantine.Entry
			if json.Unmarshal(line, &e) != nil || !validID(e.ID) {
				bad++
			} else {
				recs[e.ID] = e
			}
		}
		if err == io.EOF {
			return recs, bad, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read the quarantine journal: %w", err)
		}
	}
}

// readLine returns the next line without its newline; a line longer than MaxRecord is discarded as it
// is read (never held) and reported as long.
func readLine(br *bufio.Reader) (line []byte, long bool, err error) {
	for {
		frag, err := br.ReadSlice('\n')
		if !long && len(line)+len(frag) > quarantine.MaxRecord {
			long, line = true, nil
		}
		if !long {
			line = append(line, frag...)
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), long, err
	}
}

// validID reports whether id can name an object in the folder.
func validID(id string) bool {
	return quarantine.FileName(id) && id != JournalName
}

// names lists the folder.
func (l *Local) names() ([]string, error) {
	fd, err := unix.Openat(l.dir, ".", unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), store.QuarantineDir)
	defer f.Close()
	return f.Readdirnames(-1)
}

// rewriteJournal replaces the journal with the records keep (Tidy's; the caller holds mu exclusively
// and recMu): written and fsync'ed beside the old one and renamed over it, so a crash leaves one or the
// other, whole.
func (l *Local) rewriteJournal(keep []quarantine.Entry) error {
	quarantine.SortEntries(keep)
	var buf bytes.Buffer
	for _, e := range keep {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	tmp := JournalName + tmpSuffix
	fd, err := unix.Openat(l.dir, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("rewrite the quarantine journal: %w", err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, werr := f.Write(buf.Bytes())
	if werr == nil {
		werr = f.Sync()
	}
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		werr = unix.Renameat(l.dir, tmp, l.dir, JournalName)
	}
	if werr != nil {
		_ = unix.Unlinkat(l.dir, tmp, 0)
		return fmt.Errorf("rewrite the quarantine journal: %w", werr)
	}
	_ = unix.Fsync(l.dir)
	j, err := l.openJournal()
	if err != nil {
		return err
	}
	l.journal.Close()
	l.journal = j
	recs := make(map[string]quarantine.Entry, len(keep))
	for _, e := range keep {
		recs[e.ID] = e
	}
	l.recs = recs
	return nil
}
