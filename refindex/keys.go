package refindex

import (
	"bytes"
	"encoding/binary"
	"sort"

	"encoding/json"
	"errors"
	"fmt"
	"github.com/klauspost/compress/zstd"
	"time"

	"github.com/ckguard/ckguard/refindex/store"
)

// SchemaVersion is the layout of the badger keys below. An index of another schema is refused with a
// message telling the user to rebuild it (it is derived data).
const SchemaVersion = 2

// Key layout (one badger DB per generation; every key starts with a one-letter table and '/'):
//
//	m/schema, m/fingerprint, m/lastsync, m/syncerr,
//	m/syncpending, m/mountrules   index metadata (rolling.go, mountrules.go)
//	c/<metaKey>                    → checkpointRecord (JSON): one per `_metadata`, parseable or not
//	f/<metaKey>                    → forward references of that checkpoint (encodeRefs)
//	r/<objKey>\x00<metaKey>        → "" : reverse map, object inside the store → referencing checkpoint
//	d/<dirKey>\x00<metaKey>        → "" : file-merging directory handles (also kept in memory)
//	o/<uri>\x00<metaKey>           → "" : references outside the guarded store
//	t/<objKey>                     → retire time: the object's last referencing checkpoint was retired
//
// Decide for a file is one prefix scan of r/<objKey>\x00 (first few referencing checkpoints + count);
// "anything referenced below directory P?" is one prefix scan of r/P/. Store keys never contain NUL,
// so \x00 ends an object key unambiguously and sorts before '/', keeping r/P\x00… next to r/P/….
var (
	keySchema      = []byte("m/schema")
	keyFingerprint = []byte("m/fingerprint")
	keyLastSync    = []byte("m/lastsync")
	keySyncErr     = []byte("m/syncerr")
)

const (
	tblCheckpoint = "c/"
	tblForward    = "f/"
	tblReverse    = "r/"
	tblDir        = "d/"
	tblOutside    = "o/"
	tblTombstone  = "t/"
)

func ckKey(meta string) []byte  { return []byte(tblCheckpoint + meta) }
func fwdKey(meta string) []byte { return []byte(tblForward + meta) }
func pairKey(tbl, obj, meta string) []byte {
	b := make([]byte, 0, len(tbl)+len(obj)+1+len(meta))
	b = append(b, tbl...)
	b = append(b, obj...)
	b = append(b, 0)
	return append(b, meta...)
}
func tombKey(obj string) []byte { return []byte(tblTombstone + obj) }

// splitPair splits the part of a pair key after its table prefix.
func splitPair(k []byte, tbl string) (obj, meta string) {
	k = k[len(tbl):]
	if i := pairSep(k); i >= 0 {
		return string(k[:i]), string(k[i+1:])
	}
	return string(k), ""
}

// pairSep finds the NUL between the object and the checkpoint of a pair key's tail: the LAST one.
// The checkpoint is a store key and never holds a NUL; an object key cannot either since c6bdafe,
// but an index generation written before may still hold one, and every reader (the reference
// filter's fill above all, which must hash exactly what apply and rebuild count) splits the same way.
func pairSep(k []byte) int { return bytes.LastIndexByte(k, 0) }

// reverseObject returns the object of a reverse-table key (r/<obj>\x00<meta>). The reference filter
// hashes what it returns on every path that counts: apply, rebuild and the background fill.
func reverseObject(k []byte) ([]byte, bool) {
	k = k[len(tblReverse):]
	i := pairSep(k)
	if i < 0 {
		return nil, false
	}
	return k[:i], true
}

// RefKind says how a checkpoint references an object.
type RefKind uint8

const (
	RefFile      RefKind = 1 // absolute file handle
	RefRelative  RefKind = 2 // relative handle, resolved against the _metadata's directory
	RefSegment   RefKind = 3 // a byte range of a file-merging physical file (the whole file is needed)
	RefDirectory RefKind = 4 // a file-merging managed directory (needed as a whole)
)

func (k RefKind) String() string {
	switch k {
	case RefFile:
		return "file"
	case RefRelative:
		return "relative"
	case RefSegment:
		return "segment"
	case RefDirectory:
		return "directory"
	}
	return "unknown"
}

// ref is one normalised reference of a checkpoint.
type ref struct {
	Key    string // store key (Inside) or canonical outside URI
	Inside bool
	Kind   RefKind
	Length int64 // bytes of state the handle covers (0 if unknown)
}

// Forward references are the bulk of the index (a checkpoint names ~1,000 SSTs, most sharing a long
// prefix), so they are stored as one value per checkpoint: sorted by key, each key encoded as the
// length of the prefix it shares with the previous one plus the rest, the whole compressed with zstd.
//
//	uvarint count, then per reference: kind, inside flag, uvarint shared, uvarint len(rest), rest,
//	varint length
var (
	zenc, _ = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	zdec, _ = zstd.NewReader(nil, zstd.WithDecoderConcurrency(0))
)

func encodeRefs(refs []ref) []byte {
	sorted := make([]ref, len(refs))
	copy(sorted, refs)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Key < sorted[j].Key })
	n := 10
	for _, r := range sorted {
		n += len(r.Key)/4 + 16
	}
	b := make([]byte, 0, n)
	b = binary.AppendUvarint(b, uint64(len(sorted)))
	prev := ""
	for _, r := range sorted {
		in := byte(0)
		if r.Inside {
			in = 1
		}
		shared := 0
		for shared < len(prev) && shared < len(r.Key) && prev[shared] == r.Key[shared] {
			shared++
		}
		b = append(b, byte(r.Kind), in)
		b = binary.AppendUvarint(b, uint64(shared))
		b = binary.AppendUvarint(b, uint64(len(r.Key)-shared))
		b = append(b, r.Key[shared:]...)
		b = binary.AppendVarint(b, r.Length)
		prev = r.Key
	}
	return zenc.EncodeAll(b, make([]byte, 0, len(b)/2))
}

var errCorrupt = errors.New("corrupt forward-reference record")

func decodeRefs(z []byte) ([]ref, error) {
	b, err := zdec.DecodeAll(z, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", errCorrupt, err)
	}
	cnt, n := binary.Uvarint(b)
	if n <= 0 || cnt > uint64(len(b)) {
		return nil, errCorrupt
	}
	b = b[n:]
	out := make([]ref, 0, cnt)
	prev := ""
	for i := uint64(0); i < cnt; i++ {
		if len(b) < 2 {
			return nil, errCorrupt
		}
		r := ref{Kind: RefKind(b[0]), Inside: b[1] == 1}
		b = b[2:]
		shared, n := binary.Uvarint(b)
		if n <= 0 || shared > uint64(len(prev)) {
			return nil, errCorrupt
		}
		b = b[n:]
		l, n := binary.Uvarint(b)
		if n <= 0 || uint64(len(b)-n) < l {
			return nil, errCorrupt
		}
		r.Key = prev[:shared] + string(b[n:n+int(l)])
		b = b[n+int(l):]
		r.Length, n = binary.Varint(b)
		if n <= 0 {
			return nil, errCorrupt
		}
		b = b[n:]
		out = append(out, r)
		prev = r.Key
	}
	return out, nil
}

// checkpointRecord is what the index knows about one `_metadata` file.
type checkpointRecord struct {
	Key     string    `json:"key"`   // store key of the _metadata
	Job     string    `json:"job"`   // job folder (chk-N's parent) or a savepoint's parent folder
	ID      int64     `json:"id"`    // checkpoint id (-1 unknown)
	Kind    string    `json:"kind"`  // checkpoint | savepoint | unknown
	ModTime time.Time `json:"mtime"` // completion time (the _metadata's mtime)
	Size    int64     `json:"size"`  // size of the _metadata
	ETag    string    `json:"etag,omitempty"`
	Format  int       `json:"format,omitempty"` // _metadata format version
	Refs    int       `json:"refs"`             // references inside the store
	Outside int       `json:"outside,omitempty"`
	// Err is set when the file could not be parsed: the index cannot know what it references.
	Err string `json:"err,omitempty"`
	// Bad classifies a record with Err (badDamaged, badNewerFormat, badTooLarge, badUnaddressable;
	// empty in records an older version wrote, which count as unjudgeable until read again). See
	// damaged.
	Bad string `json:"bad,omitempty"`
	// HeldRefs: a damaged version of a `_metadata` that was parseable before keeps the references of
	// that previous version while it is younger than --grace (it may be a rewrite in progress, read
	// half-written); the sync reads it again until it parses or is past grace.
	HeldRefs bool `json:"held_refs,omitempty"`
	// Changing: judged damaged because it changed at each read of a sync (readEntry); the next sync
	// reads it again whatever its size and time (a rewrite in place can keep both to the second).
	Changing bool `json:"changing,omitempty"`
	// Inferred lists the prefix maps ("PREFIX=STOREPATH") the store proved for references no --map
	// covers (see resolveOutside); the references they cover are inside the store and protect files.
	Inferred []string `json:"inferred,omitempty"`
	// External counts references below a declared --external prefix (reported, not refused).
	External int `json:"external,omitempty"`
	// Unmapped counts references outside the store that are neither external nor placed by the store:
	// where they lie is unknown, so every store file that could be one of them is refused
	// (memState.unprovenFor). UnmappedURI is the first, as canonicalised.
	Unmapped    int    `json:"unmapped,omitempty"`
	UnmappedURI string `json:"unmapped_uri,omitempty"`
	// Unproven maps the base name of each unmapped file reference to its URI; UnprovenDirs lists the
	// unmapped directory handles (anything below any folder could be theirs).
	Unproven     map[string]string `json:"unproven,omitempty"`
	UnprovenDirs []string          `json:"unproven_dirs,omitempty"`
	// UID owns the `_metadata` where the store has owners (nil: unknown, as on S3). Checkpoints compete
	// for the newest of a job only with those of the same owner (memState.newest), and retiring one
	// lifts the grace period only from files of its owner (tombstone).
	UID *uint32 `json:"uid,omitempty"`
	// JobOwner: the `_metadata` has the owner of its job folder and of the folder around it (Flink's
	// JobManager creates the job folder in its base folder; see ownsJobFolder).
	// Its retirement then lifts grace from every file inside that job folder, whoever owns it
	// (TaskManagers may run as another user than the JobManager); see tombstoneLifts.
	JobOwner bool `json:"job_owner,omitempty"`
}

// uidOf returns the owner of oi, nil when the store has none.
func uidOf(oi store.ObjectInfo) *uint32 {
	if !oi.HasUID {
		return nil
	}
	u := oi.UID
	return &u
}

func (c *checkpointRecord) marshal() []byte {
	b, _ := json.Marshal(c)
	return b
}

func unmarshalRecord(b []byte) (*checkpointRecord, error) {
	var c checkpointRecord
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("checkpoint record: %w", err)
	}
	return &c, nil
}

func encodeTime(t time.Time) []byte { return binary.BigEndian.AppendUint64(nil, uint64(t.UnixNano())) }
func decodeTime(b []byte) time.Time {
	if len(b) != 8 {
		return time.Time{}
	}
	return time.Unix(0, int64(binary.BigEndian.Uint64(b)))
}
