package refindex

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"sync"
	"time"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
	"github.com/ckguard/ckguard/refindex/pathnorm"
	"github.com/ckguard/ckguard/refindex/store"
)

// The restorability drill (verify --deep) checks more than existence: every file a live checkpoint
// references is readable and at least as large as its handle says (a file's declared state size; a
// segment's offset + length within its physical file). The sizes are not kept in the index: the drill
// re-reads each live _metadata from the store, so the index stays small, the drill judges the
// checkpoint as it is in the store now (storage is the truth), and segments keep their offsets (the
// index keeps only a summed length per object).

// DrillOptions tune a drill.
type DrillOptions struct {
	// Read reads every byte of every referenced file (else only the last byte each handle needs).
	Read bool
	// ReadRate caps the bytes read per second with Read (0 = no cap).
	ReadRate int64
	// Only restricts the drill to the checkpoints it returns true for (nil = every live checkpoint).
	Only func(CheckpointInfo) bool
	// Progress, when set, is told the bytes read so far and the total with Read.
	Progress func(done, total int64)
}

// ShortObject is a referenced file smaller than its handles need.
type ShortObject struct {
	Path     string `json:"path"`
	Size     int64  `json:"size"`
	Expected int64  `json:"expected_size"`
}

// UnreadableObject is a referenced file that exists but could not be read.
type UnreadableObject struct {
	Path  string `json:"path"`
	Error string `json:"error"`
}

// DrilledCheckpoint is one checkpoint the drill judged.
type DrilledCheckpoint struct {
	CheckpointInfo
	OK bool `json:"ok"`
	// Unchecked counts references the drill could not check: outside the guarded store and not below
	// an --external prefix (where they lie is unknown).
	Unchecked int `json:"unchecked_refs,omitempty"`
}

// DrillResult is the answer of Drill: Verify's answer (broken checkpoints also list short and
// unreadable files) plus what was read.
type DrillResult struct {
	VerifyResult
	Deep        bool                `json:"deep"`
	Read        bool                `json:"read"`
	BytesRead   int64               `json:"bytes_read"`
	ReadSeconds float64             `json:"read_seconds"`
	MBPerSecond float64             `json:"mb_per_second"`
	Checkpoints []DrilledCheckpoint `json:"checkpoints"`
}

// need is what the handles of the drilled checkpoints require of one object.
type need struct {
	key  string
	size int64 // bytes the object must have at least
	dir  bool  // a file-merging directory handle: must exist
}

// Drill runs the restorability drill over the live checkpoints (see DrillOptions), in phases: take
// the live checkpoints from one view of the index, plan each distinct object's needs from the
// _metadata as they are in the store now, check each object once, read them when asked, and judge
// each checkpoint from its objects' verdicts.
func (ix *Index) Drill(ctx context.Context, o DrillOptions) (*DrillResult, error) {
	defer ix.beginWork()()
	res := &DrillResult{VerifyResult: VerifyResult{Broken: []BrokenCheckpoint{}}, Deep: true, Read: o.Read, Checkpoints: []DrilledCheckpoint{}}
	snap, err := ix.drillSnapshot(o, res)
	if err != nil {
		return nil, err
	}
	plan, err := ix.drillPlan(ctx, snap.infos, res)
	if err != nil {
		return nil, err
	}
	verdicts, err := ix.drillStat(ctx, plan, o.Read)
	if err != nil {
		return nil, err
	}
	if o.Read {
		if err := ix.drillRead(ctx, o, plan, verdicts, res); err != nil {
			return nil, err
		}
	}
	drillJudge(plan, verdicts, res)
	switch {
	case snap.blocked != "":
		res.Untrusted = snap.blocked
	case snap.unknownWhy != "":
		res.Untrusted = snap.unknownWhy
	case res.UnmappedSkipped > 0:
		res.Untrusted = fmt.Sprintf("%d reference(s) could not be checked: %s", res.UnmappedSkipped, snap.unmappedWhy)
	case len(res.Unparseable) > 0:
		res.Untrusted = snap.unparseableWhy
	}
	res.OK = len(res.Broken) == 0 && res.Untrusted == ""
	return res, nil
}

// drillView is what the drill takes from one view of the index: the live checkpoints to drill and
// the reasons the answer cannot be green whatever the objects show.
type drillView struct {
	infos          []CheckpointInfo // parseable checkpoints selected by DrillOptions.Only
	blocked        string           // the index cannot be trusted at all
	unknownWhy     string           // unknown subtrees that may hide live checkpoints
	unmappedWhy    string           // why references outside every mapped prefix cannot be checked
	unparseableWhy string           // why unparseable _metadata keep the answer from green
}

// drillSnapshot reads the live checkpoints from one view of the index and records the unparseable
// ones in res (they have no references to check; verify is not green on them).
func (ix *Index) drillSnapshot(o DrillOptions, res *DrillResult) (drillView, error) {
	v, err := ix.acquire()
	if err != nil {
		return drillView{}, err
	}
	defer v.release()
	dv := drillView{blocked: v.blocked(), unknownWhy: unknownHides(v.unknown), unmappedWhy: ix.unmappedBlock(v)}
	if len(v.st.unparseable) > 0 {
		dv.unparseableWhy = unparseableUntrusted(v.st)
	}
	for _, k := range v.st.sorted {
		c := v.st.ckpts[k]
		ci := v.info(c)
		if o.Only != nil && !o.Only(ci) {
			continue
		}
		if ci.Error != "" {
			res.Unparseable = append(res.Unparseable, BrokenCheckpoint{Metadata: ci.Metadata, Error: ci.Error, Class: c.Bad, Scope: badScope(c)})
			continue
		}
		dv.infos = append(dv.infos, ci)
	}
	return dv, nil
}

// drillJob is one drilled checkpoint: what its handles need, or why it is broken before any
// object is checked.
type drillJob struct {
	ci     CheckpointInfo
	needs  []need
	broken *BrokenCheckpoint
	out    int // references outside the store and below no --external prefix
}

// drillPlanned is the plan of a drill: the checkpoints and the distinct objects they need, each
// object once with the most any handle needs of it.
type drillPlanned struct {
	jobs  []*drillJob
	needs map[string]*need
	order []string // the keys of needs in first-seen order
}

// drillPlan re-reads each checkpoint's _metadata from the store and collects what it needs.
func (ix *Index) drillPlan(ctx context.Context, infos []CheckpointInfo, res *DrillResult) (*drillPlanned, error) {
	p := &drillPlanned{needs: map[string]*need{}}
	for _, ci := range infos {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		j := &drillJob{ci: ci}
		p.jobs = append(p.jobs, j)
		refs, err := ix.drillRefs(ctx, ci.Metadata, ci.InferredMaps)
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				j.broken = &BrokenCheckpoint{Metadata: ci.Metadata, Error: "the _metadata is gone from the store since the last index sync"}
				continue
			}
			var pe parseError
			if errors.As(err, &pe) {
				j.broken = &BrokenCheckpoint{Metadata: ci.Metadata, Error: pe.Error()}
				continue
			}
			return nil, err
		}
		for _, r := range refs {
			if !r.inside {
				res.OutsideSkipped++
				if ix.norm.IsExternal(r.key) {
					res.ExternalSkipped++
				} else {
					res.UnmappedSkipped++
					j.out++
				}
				continue
			}
			n, ok := p.needs[r.key]
			if !ok {
				n = &need{key: r.key}
				p.needs[r.key] = n
				p.order = append(p.order, r.key)
			}
			n.size = max(n.size, r.size)
			n.dir = n.dir || r.dir
			j.needs = append(j.needs, need{key: r.key, size: r.size, dir: r.dir})
		}
	}
	res.Objects = len(p.order)
	return p, nil
}

// objectVerdict is what the drill found of one object.
type objectVerdict struct {
	size    int64
	missing bool
	err     string // unreadable: the read's error
}

// drillStat checks each distinct object once, with bounded concurrency (network stores): it exists,
// and unless every byte is read later, the last byte its handles need reads.
func (ix *Index) drillStat(ctx context.Context, p *drillPlanned, readAll bool) (map[string]*objectVerdict, error) {
	verdicts := make(map[string]*objectVerdict, len(p.order))
	var mu sync.Mutex
	var firstErr error
	bar := ix.newBar(len(p.order), "drilling")
	stat := ix.freshStat()
	ix.inParallel(ctx, len(p.order), bar, func(i int) {
		n := p.needs[p.order[i]]
		vd := &objectVerdict{}
		oi, err := stat(ctx, n.key)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			vd.missing = true
		case err != nil:
			mu.Lock()
			if firstErr == nil {
				firstErr = fmt.Errorf("verify --deep: stat %s: %w", n.key, err)
			}
			mu.Unlock()
			return
		case n.dir || oi.IsDir:
			vd.size = oi.Size
		default:
			vd.size = oi.Size
			if !readAll && oi.Size >= n.size && n.size > 0 {
				// Readable as far as the handles need: the last byte they cover.
				if err := readOne(ctx, ix.st, n.key, n.size-1); err != nil {
					vd.err = err.Error()
				}
			}
		}
		mu.Lock()
		verdicts[n.key] = vd
		mu.Unlock()
	})
	bar.Finish()
	if firstErr != nil {
		return nil, firstErr
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return verdicts, nil
}

// drillRead reads every byte of every present file object, paced by DrillOptions.ReadRate, and
// records read errors in the objects' verdicts.
func (ix *Index) drillRead(ctx context.Context, o DrillOptions, p *drillPlanned, verdicts map[string]*objectVerdict, res *DrillResult) error {
	var total int64
	for _, k := range p.order {
		if vd := verdicts[k]; !vd.missing && !p.needs[k].dir {
			total += vd.size
		}
	}
	start := time.Now()
	rd := &rateReader{rate: o.ReadRate, start: start, total: total, progress: o.Progress}
	for _, k := range p.order {
		vd := verdicts[k]
		if vd.missing || p.needs[k].dir {
			continue
		}
		if err := rd.readAll(ctx, ix.st, k, vd.size); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			vd.err = err.Error()
		}
	}
	res.BytesRead = rd.done
	res.ReadSeconds = time.Since(start).Seconds()
	if res.ReadSeconds > 0 {
		res.MBPerSecond = float64(rd.done) / (1 << 20) / res.ReadSeconds
	}
	return nil
}

// drillJudge judges each checkpoint from its objects' verdicts: broken when one is missing,
// unreadable or shorter than its handles need.
func drillJudge(p *drillPlanned, verdicts map[string]*objectVerdict, res *DrillResult) {
	for _, j := range p.jobs {
		res.Checked++
		b := j.broken
		if b == nil {
			b = judgeNeeds(j, p, verdicts)
		}
		if b != nil {
			res.Broken = append(res.Broken, *b)
		}
		res.Checkpoints = append(res.Checkpoints, DrilledCheckpoint{CheckpointInfo: j.ci, Unchecked: j.out, OK: b == nil})
	}
	sort.Slice(res.Broken, func(a, b int) bool { return res.Broken[a].Metadata < res.Broken[b].Metadata })
}

// judgeNeeds is the broken record of one checkpoint whose _metadata parsed, or nil when every object
// it needs is present, readable and large enough.
func judgeNeeds(j *drillJob, p *drillPlanned, verdicts map[string]*objectVerdict) *BrokenCheckpoint {
	b := &BrokenCheckpoint{Metadata: j.ci.Metadata}
	seen := map[string]bool{}
	for _, n := range j.needs {
		if seen[n.key] {
			continue
		}
		seen[n.key] = true
		vd := verdicts[n.key]
		switch {
		case vd.missing:
			b.MissingCount++
			if len(b.Missing) < 1000 {
				b.Missing = append(b.Missing, n.key)
			}
		case vd.err != "":
			b.Unreadable = append(b.Unreadable, UnreadableObject{Path: n.key, Error: vd.err})
		case !n.dir && vd.size < p.needs[n.key].size:
			b.Short = append(b.Short, ShortObject{Path: n.key, Size: vd.size, Expected: p.needs[n.key].size})
		}
	}
	if b.MissingCount == 0 && len(b.Unreadable) == 0 && len(b.Short) == 0 {
		return nil
	}
	return b
}

// drillRef is one reference of a _metadata with the bytes it needs of its object.
type drillRef struct {
	key    string
	inside bool
	size   int64
	dir    bool
}

// parseError is a _metadata that no longer parses (it changed since the last sync).
type parseError struct{ err error }

func (e parseError) Error() string { return e.err.Error() }

// drillRefs re-reads the _metadata at key and lists what each reference needs: a file its declared
// state size, a segment its offset + length, a directory to exist.
// References outside the store are placed by the mappings the index inferred for this checkpoint.
func (ix *Index) drillRefs(ctx context.Context, key string, inferred []string) ([]drillRef, error) {
	r, err := ix.st.Open(ctx, key)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	size := r.Size()
	if size > maxMetadataSize {
		return nil, parseError{fmt.Errorf("%s is %d bytes, larger than a _metadata may be (%d)", key, size, maxMetadataSize)}
	}
	m, err := flinkmeta.Parse(r, size, key, flinkmeta.Options{})
	if err != nil {
		return nil, parseError{err}
	}
	var out []drillRef
	for _, rf := range m.References(key) {
		var d drillRef
		switch rf.Kind {
		case flinkmeta.RefRelative:
			k := ix.norm.Relative(key, rf.URI)
			d = drillRef{key: k.Path, inside: k.Inside, size: rf.StateSize}
		case flinkmeta.RefSegment:
			k := ix.norm.Absolute(rf.URI)
			d = drillRef{key: k.Path, inside: k.Inside, size: rf.Offset + rf.Length}
		case flinkmeta.RefDirectory:
			k := ix.norm.Absolute(rf.URI)
			d = drillRef{key: k.Path, inside: k.Inside, dir: true}
		default:
			k := ix.norm.Absolute(rf.URI)
			d = drillRef{key: k.Path, inside: k.Inside, size: rf.StateSize}
		}
		if !d.inside && rf.Kind != flinkmeta.RefRelative {
			if k, ok := pathnorm.ApplyInferred(inferred, d.key); ok {
				d.key, d.inside = k.Path, k.Inside
			}
		}
		out = append(out, d)
	}
	return out, nil
}

// readOne reads the byte at off of key.
func readOne(ctx context.Context, st store.Store, key string, off int64) error {
	r, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	var b [1]byte
	if _, err := r.ReadAt(b[:], off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("read %s at byte %d: %w", key, off, err)
	}
	return nil
}

// rateReader reads objects in chunks, sleeping so that the bytes read since start stay under rate.
type rateReader struct {
	rate        int64
	start       time.Time
	done, total int64
	progress    func(done, total int64)
	buf         []byte
}

const drillChunk = 1 << 20

func (rr *rateReader) readAll(ctx context.Context, st store.Store, key string, size int64) error {
	r, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer r.Close()
	if rr.buf == nil {
		rr.buf = make([]byte, drillChunk)
	}
	for off := int64(0); off < size; {
		n := int(min(int64(len(rr.buf)), size-off))
		got, err := r.ReadAt(rr.buf[:n], off)
		if got == 0 && err == nil {
			err = io.ErrNoProgress
		}
		off += int64(got)
		rr.done += int64(got)
		if rr.progress != nil {
			rr.progress(rr.done, rr.total)
		}
		if err != nil && !(errors.Is(err, io.EOF) && got == n) {
			return fmt.Errorf("read %s at byte %d of %d: %w", key, off, size, err)
		}
		if rr.rate > 0 {
			due := rr.start.Add(time.Duration(float64(rr.done) / float64(rr.rate) * float64(time.Second)))
			if d := time.Until(due); d > 0 {
				t := time.NewTimer(d)
				select {
				case <-ctx.Done():
					t.Stop()
					return ctx.Err()
				case <-t.C:
				}
			}
		}
	}
	return nil
}
