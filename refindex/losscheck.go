package refindex

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sort"
	"sync"
	"time"
)

// The loss check notices a referenced object that vanished outside the mount (a lifecycle rule, a
// script on another host, a JobManager disposing a savepoint directly on the store) while the mount
// runs, instead of when someone next runs verify. It checks the store keys live checkpoints reference.
//
// Cost: on a local store one stat per distinct referenced object, cheap enough for every sync. On S3
// a stat is a HEAD request (about 20 ms, paid per request), but one listing request answers for up to
// 1,000 keys of a folder, and Flink keeps a job's incremental state in one folder (shared/): a folder
// holding several referenced objects is listed (DirLister, the range from its first to its last
// referenced key, cut off at one request per object so it is never dearer than the stats), a folder
// holding one is stat'ed, and an object a listing did not show is stat'ed before it counts as gone.
// A pass may be given a budget of requests: it then checks the next stretch of a rotation over the
// sorted referenced keys, from where the previous pass stopped, plus every object an earlier pass found
// missing (so a loss, once seen, stays reported until
// the object is back or no live checkpoint references it). LossReport.RoundPasses says how many passes
// a full rotation takes, LastComplete when the last one ended, and nothing is called intact that no
// pass of the current rotation has checked.
//
// A missing object is reported only for a checkpoint that is still the same live record after the
// stats: the mount retires a `_metadata` before it allows the deletion of the files only it
// referenced, so a file deleted through the mount by a retirement racing the check is not a loss.

// QuarantinedObject says where quarantine keeps a store key the guard allowed to delete.
type QuarantinedObject struct {
	Since time.Time `json:"since"`
	// Restore is the command that puts the object back at its path.
	Restore string `json:"restore"`
	// DeleteMarker is set when a delete marker of a versioned bucket hides the object (not ckguard's
	// quarantine: a deletion outside the mount); Since is then the marker's time.
	DeleteMarker string `json:"delete_marker,omitempty"`
}

// QuarantineFinder looks a store key up in the mount's quarantine (staged deletion). ok is false when
// the key is not held there.
type QuarantineFinder interface {
	FindQuarantined(ctx context.Context, key string) (q QuarantinedObject, ok bool, err error)
}

// LossCheckOptions tune a LossChecker.
type LossCheckOptions struct {
	// Budget caps the requests a pass is expected to send to the store (stats, and listings of
	// folders on stores that list: DirLister) besides one stat per known-missing object (0: every
	// referenced object at every pass). A pass checks at least one object, however dear; it may end
	// inside a folder (the next pass lists the rest).
	Budget int
	// Parallel bounds the requests in flight (0: DefaultLossParallel).
	Parallel int
	// Pacer, when set, is waited on before every request a pass sends to the store (stats and each
	// listing page): it spaces them out (pace.Limiter: a rate, slower while the mount is busy).
	Pacer Pacer
	// Quarantine, when set, is asked about every object found missing.
	Quarantine QuarantineFinder
	// Chunk splits a pass into chunks of about this many expected requests, checked one after the
	// other (0: the whole pass is one chunk). After each chunk but the last, Progress (when set) gets a
	// report of the losses known so far: a loss shows a chunk after its folder was listed, not a whole
	// pass after, and LossReport.Revisit can be measured chunk by chunk.
	Chunk int
	// Evidence, when set, holds the mount's own complete folder listings: a unit listed lately by the
	// mount is taken from there instead of a request (ListingEvidence), and the gaps between checks of
	// each unit are measured there.
	Evidence *ListingEvidence
	// FlinkRefresh, when set (--flink-rest), asks the endpoints again and installs their answers
	// (SetFlink) before a report names a new missing object of a checkpoint in a job's folder while
	// the REST facts are older than the pass that found it: Flink marks a checkpoint discarded
	// right before it deletes it, so facts from before the deletion would call Flink's own
	// deletion a loss. It returns when the answers are in or ctx ends (bounded by the caller).
	FlinkRefresh func(ctx context.Context)
	// Progress receives the report after each chunk but the last (the pass's own report is Check's
	// answer). It runs in the pass: a slow Progress delays the pass.
	Progress func(*LossReport)
}

// Pacer spaces out a pass's requests: Wait returns when the next one may be sent, or ctx's error; the
// caller calls release when that request has ended.
type Pacer interface {
	Wait(ctx context.Context) (release func(), err error)
}

// LostReference is a store object a live checkpoint references that the store no longer has.
type LostReference struct {
	Path       string `json:"path"`
	Checkpoint string `json:"checkpoint"` // store key of the referencing _metadata
	Job        string `json:"job"`
	// Quarantine is set when the object is held in quarantine (restorable).
	Quarantine *QuarantinedObject `json:"quarantine,omitempty"`
	// Since is when a pass first found it missing.
	Since time.Time `json:"since"`
	// Expected is why Flink itself deletes the checkpoint (flinkexpected.go): not a loss ("": one).
	Expected string `json:"expected,omitempty"`
}

// LossReport is the answer of one pass.
type LossReport struct {
	Time time.Time `json:"time"`
	// Objects is the distinct referenced objects inside the store, as the last complete rotation
	// found them (before one has ended: as the first pass counted them); so are RoundRequests and
	// RoundPasses.
	Objects int `json:"objects"`
	Checked int `json:"checked"` // of them checked by this pass
	// Requests is what this pass sent to the store (listings and stats); RoundRequests what a full
	// rotation takes, and RoundPasses the passes it needs under the budget (1: every pass is complete).
	Requests      int `json:"requests"`
	RoundRequests int `json:"round_requests"`
	RoundPasses   int `json:"round_passes"`
	// Complete is set when this pass ended a rotation: every referenced object was stat'ed since the
	// rotation began. LastComplete is when the last rotation ended (zero: none yet).
	Complete     bool      `json:"complete"`
	LastComplete time.Time `json:"last_complete,omitzero"`
	// Missing lists every (object, checkpoint) known missing now; New those this pass found first.
	Missing []LostReference `json:"missing"`
	New     []LostReference `json:"new"`
	// Expected lists the pairs known missing whose checkpoint Flink reports it deletes itself
	// (--flink-rest: a checkpoint discarded in its history, or retained by a job that ended in a
	// state its retention deletes on), each with its reason: not losses, in neither Missing nor
	// Jobs. NewExpected are those no earlier report named.
	Expected    []LostReference `json:"expected"`
	NewExpected []LostReference `json:"new_expected"`
	// Jobs maps every job folder with a live checkpoint to its broken checkpoints and missing objects
	// (zero for a healthy job, so a gauge per job goes back to 0).
	Jobs map[string]JobLoss `json:"jobs"`
	// Unchecked counts references outside the store (unmapped or --external): no pass can stat them.
	Unchecked int `json:"unchecked_refs"`
	// Partial is set on a report made after a chunk, before the pass ended (LossCheckOptions.Progress).
	Partial bool `json:"partial,omitempty"`
	// Revisit is the longest time, over this pass's chunks, from the start of the chunk of the
	// previous pass that held the chunk's first object to this chunk's report: the delay of a deletion
	// made right after the previous pass's check of an object, measured. Zero when unknown (a first
	// pass, or a pass or its predecessor that was not a whole rotation on its own).
	Revisit time.Duration `json:"revisit_ns,omitempty"`
	// LongestChunk is the longest chunk of this pass, its stats and its report included.
	LongestChunk time.Duration `json:"longest_chunk_ns,omitempty"`
	// Planning is the time this pass spent reading the reverse table for its plan (while the previous
	// segment's requests were under way, but for each chunk's first segment).
	Planning time.Duration `json:"planning_ns,omitempty"`
	// Latency is the mean time of this pass's requests, each from its pacer slot to its answer.
	Latency time.Duration `json:"latency_ns,omitempty"`
}

// JobLoss counts one job's losses.
type JobLoss struct {
	BrokenCheckpoints int `json:"broken_checkpoints"`
	MissingObjects    int `json:"missing_objects"`
}

// LossChecker runs the loss check pass after pass; it keeps the rotation and the known losses
// between passes. Passes are serialised.
type LossChecker struct {
	ix *Index
	o  LossCheckOptions

	mu           sync.Mutex
	cursor       string    // last key the rotation checked (meaningful while rotating)
	rotating     bool      // a rotation is under way (cursor is meaningful)
	lastComplete time.Time // end of the last complete rotation
	// The last complete rotation (objects, expected requests and passes, cut as the passes cut), or
	// before the first one ends, the count the first pass made of the table: what the reports say.
	roundObjects, roundRequests, roundPasses int
	// The rotation under way so far (its passes' keys, expected requests and passes).
	rotObjects, rotRequests, rotPasses int
	// counted is the keys the last pass fed to the count of the rotation (none once one has ended).
	counted int
	seg     int // keys planned and checked at once (lossSegment)
	// maxHeld is the most referenced keys the last pass held at once (its segments' units and open
	// folders): what bounds a pass's memory.
	maxHeld  int
	missing  map[string]bool // keys found missing and not seen back since
	since    map[string]time.Time
	reported map[string]bool // "key\x00checkpoint" pairs already in a report's New
	now      func() time.Time
	// prevChunks are the chunks of the previous pass when it was a whole rotation on its own (nil
	// otherwise): where each began, for LossReport.Revisit.
	prevChunks []chunkMark
}

// chunkMark is where a chunk of a pass began: its first key and the time.
type chunkMark struct {
	first string
	start time.Time
}

// NewLossChecker returns a loss checker over the index's live checkpoints.
func (ix *Index) NewLossChecker(o LossCheckOptions) *LossChecker {
	return &LossChecker{ix: ix, o: o, missing: map[string]bool{}, since: map[string]time.Time{}, reported: map[string]bool{}, now: time.Now, seg: lossSegment}
}

// Check runs one pass. An error (the index is closed, a stat failed other than not-found) means the
// pass proved nothing: the caller reports the failure; LastComplete does not advance.
//
// Memory: the pass streams the reverse table a segment of a chunk at a time (lossplan.go), one read
// transaction per segment, released before the segment's requests; it holds one segment's units (at
// most lossSegment keys, and no more than the budget's or the chunk's worth), the known losses and, per
// live checkpoint, its job, never every referenced key.
func (lc *LossChecker) Check(ctx context.Context) (*LossReport, error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	defer lc.ix.beginWork()()
	p, err := lc.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer func() { lc.maxHeld = p.cut.p.maxHeld }()
	defer p.cancel()
	for ci := 0; ; ci++ {
		last, err := p.chunk(ci)
		if err != nil {
			lc.prevChunks = nil
			p.drain()
			return nil, err
		}
		if last {
			break
		}
	}
	return p.end(), nil
}

// lossPass is one pass of Check under way: its report, its cuts and the segment in flight.
type lossPass struct {
	lc  *LossChecker
	ctx context.Context
	rep *LossReport
	// began is the records as the pass began: a loss counts only for a checkpoint still the same
	// record after the stats (fill). A memState is never changed once installed.
	began *memState
	base  map[string]JobLoss // every live job at zero
	// single are the known losses, stat'ed again first by a request of their own (not counted in
	// the budget); they still ride in their folder's unit, so a pass's chunks cover contiguous key
	// ranges (Revisit).
	single []string
	cut    *passCutter
	// round, until a rotation has ended, counts the whole rotation as the table stands (no key kept);
	// roundLast is the last key it counted.
	round     *passCutter
	roundLast []byte
	begins    bool   // this pass begins a rotation; whole if it also ends it
	after     string // the last key taken so far
	lastKey   []byte
	prev      []chunkMark // the previous pass's chunks (a whole rotation), for Revisit
	marks     []chunkMark
	complete  bool
	// The pass's requests share one bound on those in flight, whichever segment they belong to.
	sem     chan struct{}
	rt      *requestTimes
	cctx    context.Context
	cancel  context.CancelFunc
	pending *segmentCheck // the segment whose requests are under way
}

// begin sets up a pass: the report with every live job, the known losses still referenced, where
// the rotation stands and the pass's cuts.
func (lc *LossChecker) begin(ctx context.Context) (*lossPass, error) {
	ix := lc.ix
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	p := &lossPass{lc: lc, ctx: ctx, began: v.st, begins: !lc.rotating, prev: lc.prevChunks, rt: &requestTimes{},
		rep: &LossReport{Time: lc.now(), Missing: []LostReference{}, New: []LostReference{}, Expected: []LostReference{}, NewExpected: []LostReference{}, Jobs: map[string]JobLoss{}}}
	for _, k := range p.began.sorted {
		c := p.began.ckpts[k]
		p.rep.Jobs[c.Job] = JobLoss{}
		if c.Err == "" {
			p.rep.Unchecked += c.Outside // unparseable: what it references is unknown (reported and refused elsewhere)
		}
	}
	lc.forgetUnreferenced(v)
	v.release()
	p.single = make([]string, 0, len(lc.missing))
	for k := range lc.missing {
		p.single = append(p.single, k)
	}
	sort.Strings(p.single)
	par := lc.o.Parallel
	if par <= 0 {
		par = DefaultLossParallel
	}
	p.sem = make(chan struct{}, max(1, par))
	_, canList := ix.st.(DirLister)
	if lc.rotating {
		p.after = lc.cursor
	}
	p.cut = &passCutter{p: &unitPlanner{canList: canList, keep: true}, budget: lc.o.Budget, chunk: lc.o.Chunk, seg: lc.seg}
	// Until a rotation has ended, the pass that begins one also counts the whole rotation as the table
	// stands (no key kept): its objects, requests and passes under the same cuts. Afterwards each
	// rotation reports the last complete one, which its passes added up while reading their stretches:
	// a change of the store shows a rotation later, and no pass reads the whole table just to count.
	lc.counted = 0
	if p.begins {
		lc.rotObjects, lc.rotRequests, lc.rotPasses = 0, 0, 0
	}
	if p.begins && lc.lastComplete.IsZero() {
		p.round = &passCutter{p: &unitPlanner{canList: canList}, budget: lc.o.Budget, chunk: lc.o.Chunk, seg: lc.seg}
	}
	p.rep.Objects, p.rep.RoundRequests, p.rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
	p.rep.LastComplete = lc.lastComplete
	p.base = p.rep.Jobs
	p.cctx, p.cancel = context.WithCancel(ctx)
	return p, nil
}

// forgetUnreferenced drops the known losses no live checkpoint references any more.
func (lc *LossChecker) forgetUnreferenced(v *view) {
	for k := range lc.missing {
		live := false
		for _, m := range referencingMetas(v.snap.txn, k) {
			if liveRef(v.st, []byte(m)) {
				live = true
				break
			}
		}
		if !live {
			delete(lc.missing, k)
			delete(lc.since, k)
		}
	}
}

// drain ends a failing pass: its requests in flight are called off and waited for (nothing of a
// pass runs past Check).
func (p *lossPass) drain() {
	p.cancel()
	if p.pending != nil {
		<-p.pending.done
		p.pending = nil
	}
}

// countRound feeds k to the count of the whole rotation (before one has ended).
func (p *lossPass) countRound(k []byte) {
	if p.round != nil && (p.round.p.keys == 0 || bytes.Compare(k, p.roundLast) > 0) {
		p.round.feedRotation(k)
		p.roundLast = append(p.roundLast[:0], k...)
		p.lc.counted++
	}
}

// chunk checks chunk ci, segment after segment, and reports it; last: the pass ends with it.
func (p *lossPass) chunk(ci int) (last bool, err error) {
	lc := p.lc
	start := lc.now()
	first := ""
	var stop cutKind
	done := false
	for seg := 0; ; seg++ {
		if stop, done, err = p.segment(ci, seg, &first); err != nil {
			return false, err
		}
		if stop != cutSegment {
			break
		}
	}
	// A chunk's report waits for every request of the chunk.
	if err := lc.finish(p.rep, p.pending); err != nil {
		return false, err
	}
	p.pending = nil
	last = done || stop == cutPass
	if last {
		p.endRotation(done)
	}
	if !last && lc.o.Progress == nil {
		return false, nil
	}
	return last, p.report(last, start, first)
}

// segment plans a segment of the chunk from the reverse table in one read transaction, while the
// previous segment's requests are under way (the pacer, not the planning, sets the pace), launches
// its requests and takes the previous segment's results.
func (p *lossPass) segment(ci, seg int, first *string) (stop cutKind, done bool, err error) {
	lc, ix := p.lc, p.lc.ix
	t0 := lc.now()
	v, err := ix.acquire()
	if err != nil {
		return cutNone, false, err
	}
	n := 0
	p.cut.p.outside = 0
	if p.pending != nil {
		p.cut.p.outside = p.pending.keys
	}
	done, err = scanReferenced(p.ctx, v.snap.txn, v.st, p.after, func(k []byte) bool {
		p.countRound(k)
		if stop = p.cut.offer(k); stop != cutNone {
			return false
		}
		if *first == "" {
			*first = string(k)
		}
		n++
		p.lastKey = append(p.lastKey[:0], k...)
		return true
	})
	if n > 0 {
		p.after = string(p.lastKey)
	}
	v.release()
	// The segment's stretch of the reverse table is read: its pages need not stay resident while
	// the requests run (a pass over the whole table would otherwise keep the table mapped in full,
	// the mount's largest share of RSS).
	ix.releaseTablePages()
	if err == nil && !done && stop == cutPass && p.round != nil {
		err = lc.countRest(p.ctx, string(p.roundLast), p.countRound)
	}
	p.rep.Planning += lc.now().Sub(t0)
	if err != nil {
		return stop, done, fmt.Errorf("loss check: read the reference index: %w", err)
	}
	if stop == cutSegment {
		p.cut.endSegment()
	} else {
		p.cut.endChunk()
	}
	units := p.cut.p.take()
	if (done || stop == cutPass) && p.round != nil {
		p.round.endPass()
		lc.roundObjects, lc.roundRequests, lc.roundPasses = p.round.p.keys, p.round.p.made, p.round.passes
		p.rep.Objects, p.rep.RoundRequests, p.rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
	}
	var alone []string
	if ci == 0 && seg == 0 {
		alone = p.single
	}
	// This segment's requests start beside the previous one's last (one semaphore bounds both); the
	// previous one's results are taken before the next segment is planned, so a pass holds at most
	// two segments: one planned, one still in flight.
	next := lc.launch(p.cctx, units, alone, p.sem, p.rt)
	prev := p.pending
	p.pending = next
	if prev != nil {
		if err := lc.finish(p.rep, prev); err != nil {
			return stop, done, err
		}
	}
	return stop, done, nil
}

// endRotation moves the rotation on after the pass's last chunk (complete: it ended one).
func (p *lossPass) endRotation(complete bool) {
	lc, rep := p.lc, p.rep
	p.complete = complete
	lc.cursor, lc.rotating = p.after, !complete
	lc.rotObjects, lc.rotRequests, lc.rotPasses = lc.rotObjects+p.cut.p.keys, lc.rotRequests+p.cut.p.made, lc.rotPasses+1
	if complete {
		lc.cursor = ""
		lc.lastComplete = rep.Time
		lc.roundObjects, lc.roundRequests, lc.roundPasses = lc.rotObjects, lc.rotRequests, lc.rotPasses
		rep.Objects, rep.RoundRequests, rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
	}
	rep.Complete, rep.LastComplete = complete, lc.lastComplete
}

// report fills the losses known after a chunk into the pass's report (last) or a partial copy
// handed to Progress, and measures the chunk (LongestChunk, Revisit).
func (p *lossPass) report(last bool, start time.Time, first string) error {
	lc, rep := p.lc, p.rep
	out := rep
	if !last {
		cp := *rep
		cp.Partial = true
		out = &cp
	}
	out.Jobs = maps.Clone(p.base)
	if err := lc.fill(p.ctx, out, p.began); err != nil {
		return err
	}
	end := lc.now()
	rep.LongestChunk = max(rep.LongestChunk, end.Sub(start))
	if first != "" {
		m := chunkMark{first: first, start: start}
		p.marks = append(p.marks, m)
		if p.begins && len(p.prev) > 0 {
			// A chunk covers a contiguous range of keys (lossplan.go): every object of this chunk the
			// previous pass (a whole rotation) knew was checked there no sooner than the start of the
			// last chunk beginning at or before this chunk's first key (an object before all of them
			// was in the first chunk).
			i := max(0, sort.Search(len(p.prev), func(i int) bool { return p.prev[i].first > m.first })-1)
			rep.Revisit = max(rep.Revisit, end.Sub(p.prev[i].start))
		}
	}
	if !last {
		out.LongestChunk, out.Revisit = rep.LongestChunk, rep.Revisit
		lc.o.Progress(out)
	}
	return nil
}

// end closes the pass: its latency, and its chunks kept for the next pass's Revisit when it was a
// whole rotation on its own.
func (p *lossPass) end() *LossReport {
	lc, rep := p.lc, p.rep
	rep.Latency = p.rt.mean()
	if p.begins && p.complete {
		lc.prevChunks = p.marks
	} else {
		lc.prevChunks = nil
		rep.Revisit = 0 // not a whole rotation: the next pass's objects were not all checked by this one
	}
	return rep
}
