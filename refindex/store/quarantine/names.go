package quarantine

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Self-describing entry names (local and HDFS areas): <id>~<op>~<uid>~<gid>~<pid>~<comm>~<key>, comm and
// key base64url-encoded. The name is the entry record, so a staging under such a name is the move
// alone: no record is written before it, and a crash at any point leaves the object at its key or in
// the folder under a name that says where it came from. The decision's reason is "allowed" (only an
// allowed change stages) and its message is not kept (the audit log has it). A key whose name would not
// fit a limit is staged under a plain id with a record written before the move instead.

// NameSep separates the fields of a self-describing entry name (never in an id, an op, a number or
// base64url).
const NameSep = "~"

var b64 = base64.RawURLEncoding

// EntryName is the self-describing name of e ("" when it is longer than limit bytes or e's op is not
// a name's).
func EntryName(e Entry, limit int) string {
	op, key := e.Decision.Op, e.Key()
	if !validOp(op) {
		return ""
	}
	b := make([]byte, 0, len(e.ID)+len(op)+6+3*10+b64.EncodedLen(len(e.Decision.Comm))+b64.EncodedLen(len(key)))
	b = append(b, e.ID...)
	b = append(b, NameSep...)
	b = append(b, op...)
	for _, v := range [...]uint32{e.Decision.UID, e.Decision.GID, e.Decision.PID} {
		b = append(b, NameSep...)
		b = strconv.AppendUint(b, uint64(v), 10)
	}
	b = append(b, NameSep...)
	b = b64.AppendEncode(b, []byte(e.Decision.Comm))
	b = append(b, NameSep...)
	b = b64.AppendEncode(b, []byte(key))
	if len(b) > limit {
		return ""
	}
	return string(b)
}

func validOp(op string) bool {
	for _, r := range op {
		if (r < 'a' || r > 'z') && r != '-' {
			return false
		}
	}
	return op != ""
}

// ParseEntryName reads the entry a self-describing name records: its id (the whole name), key,
// deletion time and decision; the caller adds what the object itself says (size, times, mode). ok is
// false when name is no self-describing name (no NameSep in it); err is set when it has the separator
// but is not a name of ours.
func ParseEntryName(name string) (e Entry, ok bool, err error) {
	if !strings.Contains(name, NameSep) {
		return Entry{}, false, nil
	}
	f := strings.Split(name, NameSep)
	bad := func(what string) (Entry, bool, error) {
		return Entry{}, true, fmt.Errorf("entry name %q: %s: not a name of ours", name, what)
	}
	if len(f) != 7 {
		return bad("wrong number of fields")
	}
	if IDTime(f[0]).IsZero() || !validOp(f[1]) {
		return bad("id or change")
	}
	var n [3]uint32
	for i := range n {
		v, err := strconv.ParseUint(f[2+i], 10, 32)
		if err != nil {
			return bad("uid, gid or pid")
		}
		n[i] = uint32(v)
	}
	comm, err1 := b64.DecodeString(f[5])
	key, err2 := b64.DecodeString(f[6])
	if err1 != nil || err2 != nil {
		return bad("encoding")
	}
	e = Entry{ID: name, Path: string(key), DeletedAt: IDTime(f[0]).UTC(),
		Decision: Decision{Op: f[1], Reason: "allowed", UID: n[0], GID: n[1], PID: n[2], Comm: string(comm)}}
	if !utf8.Valid(key) {
		e.PathBytes = key
	}
	return e, true, nil
}

// EntryOf is the entry the object id of a quarantine folder stands for (local and HDFS areas, which
// list a folder of objects the same way): the one its self-describing name records (ParseEntryName),
// else its record (record's; ok false when it has none). problem says why it is no entry (a name with
// the separator that is not ours, no record, a record that cannot be read): reported, never purged.
// named says the entry is its name (the caller adds what the object says: size, times, mode).
func EntryOf(id string, record func(id string) (e Entry, ok bool, err error)) (e Entry, named bool, problem string) {
	if e, ok, err := ParseEntryName(id); ok {
		if err != nil {
			return Entry{}, true, err.Error()
		}
		return e, true, ""
	}
	e, problem = recordEntry(id, record)
	return e, false, problem
}

// noRecord is the problem of an object without a record.
const noRecord = "object without an entry record (its original path is unknown)"

// recordEntry is the entry of the object id as its record says (EntryOf without the names).
func recordEntry(id string, record func(id string) (Entry, bool, error)) (Entry, string) {
	e, ok, err := record(id)
	switch {
	case err != nil:
		return Entry{}, err.Error()
	case !ok:
		return Entry{}, noRecord
	}
	return e, ""
}

// FileName reports whether id can be the name of a file in one folder (the local and HDFS areas, whose
// entries are files named by their ids): not empty, "." or "..", and without a slash or NUL, so an id
// from a request or a record never names a file outside its folder.
func FileName(id string) bool {
	return id != "" && id != "." && id != ".." && !strings.ContainsAny(id, "/\x00")
}

// NewID names an entry: the deletion time (so names sort by it) and 64 random bits (so two deletions in
// the same nanosecond, or by two hosts or mounts of one store, never share a name).
func NewID(t time.Time) string {
	var r [8]byte
	_, _ = rand.Read(r[:])
	ns := t.UnixNano()
	if ns < 0 {
		return fmt.Sprintf("%019d-%s", ns, hex.EncodeToString(r[:]))
	}
	var b [19 + 1 + 16]byte
	for i := 18; i >= 0; i-- {
		b[i] = byte('0' + ns%10)
		ns /= 10
	}
	b[19] = '-'
	hex.Encode(b[20:], r[:])
	return string(b[:])
}
