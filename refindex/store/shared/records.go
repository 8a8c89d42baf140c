package shared

import (
	"context"
	"encoding/json"
	"errors"
	"io/fs"
	"sync"

	"github.com/ckguard/ckguard/internal/jsonbytes"
)

// encodeRecord is a record's data as JSON with every string that is not valid UTF-8 escaped
// (internal/jsonbytes): store keys and paths are bytes, and a key JSON changed on the way (its invalid
// bytes made U+FFFD) is another object's key: its record would not match its name, a pin of it would
// protect nothing and a hold record would be released for the wrong object.
func encodeRecord(v any) ([]byte, error) { return json.Marshal(jsonbytes.Escape(v)) }

// decodeRecord reverses encodeRecord into p. A record written before the escape has no escaped string:
// it decodes as before.
func decodeRecord(data []byte, p any) error {
	if err := json.Unmarshal(data, p); err != nil {
		return err
	}
	return jsonbytes.Unescape(p)
}

// readRecord reads and decodes the data of record name (false: there is none).
func readRecord[T any](ctx context.Context, c CAS, name string) (T, bool, error) {
	var v T
	data, _, err := Read(ctx, c, name)
	if errors.Is(err, fs.ErrNotExist) {
		return v, false, nil
	}
	if err != nil {
		return v, false, err
	}
	if err := decodeRecord(data, &v); err != nil {
		return v, false, &DamagedError{Record: c.Where() + "/" + name, Err: err}
	}
	return v, true, nil
}

// readRecords lists the records below prefix and decodes each (one gone since the listing is
// skipped). A listing and a read per record: for a command or a periodic check, not every sync.
func readRecords[T any](ctx context.Context, c CAS, prefix string) ([]T, error) {
	es, err := c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, e := range es {
		v, ok, err := readRecord[T](ctx, c, e.Name)
		if err != nil {
			return nil, err
		}
		if ok {
			out = append(out, v)
		}
	}
	return out, nil
}

// recordCache keeps the records below a prefix as last read, so that a load reads again only those
// whose version the listing shows moved. Safe for concurrent use.
type recordCache[T any] struct {
	mu   sync.Mutex
	recs map[string]cachedRecord[T] // record name → the version read and its record
	reqs int                        // requests of the last load
}

type cachedRecord[T any] struct {
	ver string
	rec T
}

// load lists prefix and returns every record. valid checks a record read under its name; a record
// it refuses (or that does not decode) fails the load with damaged's error, or, with skipDamaged, is
// left out and its error joined to the one returned beside the other records.
func (rc *recordCache[T]) load(ctx context.Context, c CAS, prefix string, valid func(name string, rec T) bool, damaged func(name string, err error) error, skipDamaged bool) ([]T, error) {
	es, err := c.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	reqs := 1
	rc.mu.Lock()
	old := rc.recs
	rc.mu.Unlock()
	next := make(map[string]cachedRecord[T], len(es))
	var skipped []error
	for _, e := range es {
		if cr, ok := old[e.Name]; ok && cr.ver == e.Version {
			next[e.Name] = cr
			continue
		}
		data, ver, err := Read(ctx, c, e.Name)
		reqs++
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		var bad *DamagedError
		if skipDamaged && errors.As(err, &bad) {
			skipped = append(skipped, &SkippedRecord{Name: e.Name, Err: err})
			continue
		}
		if err != nil {
			return nil, err
		}
		var r T
		if err := decodeRecord(data, &r); err != nil || !valid(e.Name, r) {
			if skipDamaged {
				skipped = append(skipped, &SkippedRecord{Name: e.Name, Err: damaged(e.Name, err)})
				continue
			}
			return nil, damaged(e.Name, err)
		}
		next[e.Name] = cachedRecord[T]{ver: ver, rec: r}
	}
	rc.mu.Lock()
	rc.recs, rc.reqs = next, reqs
	rc.mu.Unlock()
	out := make([]T, 0, len(next))
	for _, cr := range next {
		out = append(out, cr.rec)
	}
	return out, errors.Join(skipped...)
}

// SkippedRecord is a record a load with skipDamaged left out: its name and why.
type SkippedRecord struct {
	Name string
	Err  error
}

func (e *SkippedRecord) Error() string { return e.Err.Error() }
func (e *SkippedRecord) Unwrap() error { return e.Err }

// skippedNames returns the names of the records a load's err says were left out, or nil when err is
// not only such records (a load that failed as a whole, or no error).
func skippedNames(err error) []string {
	if err == nil {
		return nil
	}
	errs := []error{err}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		errs = j.Unwrap()
	}
	var names []string
	for _, e := range errs {
		sk, ok := e.(*SkippedRecord)
		if !ok {
			return nil
		}
		names = append(names, sk.Name)
	}
	return names
}

// requests is the number of requests the last load sent.
func (rc *recordCache[T]) requests() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.reqs
}
