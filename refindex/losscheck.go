package refindex

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
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
	ix := lc.ix
	defer ix.beginWork()()
	v, err := ix.acquire()
	if err != nil {
		return nil, err
	}
	rep := &LossReport{Time: lc.now(), Missing: []LostReference{}, New: []LostReference{}, Jobs: map[string]JobLoss{}}
	// The records as the pass began: a loss counts only for a checkpoint still the same record after
	// the stats (fill). A memState is never changed once installed.
	began := v.st
	for _, k := range began.sorted {
		c := began.ckpts[k]
		rep.Jobs[c.Job] = JobLoss{}
		if c.Err == "" {
			rep.Unchecked += c.Outside // unparseable: what it references is unknown (reported and refused elsewhere)
		}
	}
	// Known losses no checkpoint references any more are forgotten.
	for k := range lc.missing {
		live := false
		for _, m := range referencingMetas(v.snap.txn, k) {
			if liveRef(began, []byte(m)) {
				live = true
				break
			}
		}
		if !live {
			delete(lc.missing, k)
			delete(lc.since, k)
		}
	}
	v.release()
	// The known losses are looked at again first, by a stat of their own (not counted in the budget);
	// they still ride in their folder's unit, so a pass's chunks cover contiguous key ranges (Revisit).
	single := make([]string, 0, len(lc.missing))
	for k := range lc.missing {
		single = append(single, k)
	}
	sort.Strings(single)
	par := lc.o.Parallel
	if par <= 0 {
		par = DefaultLossParallel
	}
	_, canList := ix.st.(DirLister)
	begins := !lc.rotating // this pass begins a rotation; whole if it also ends it
	after := ""
	if lc.rotating {
		after = lc.cursor
	}
	cut := &passCutter{p: &unitPlanner{canList: canList, keep: true}, budget: lc.o.Budget, chunk: lc.o.Chunk, seg: lc.seg}
	defer func() { lc.maxHeld = cut.p.maxHeld }()
	// Until a rotation has ended, the pass that begins one also counts the whole rotation as the table
	// stands (no key kept): its objects, requests and passes under the same cuts. Afterwards each
	// rotation reports the last complete one, which its passes added up while reading their stretches:
	// a change of the store shows a rotation later, and no pass reads the whole table just to count.
	var round *passCutter
	lc.counted = 0
	if begins {
		lc.rotObjects, lc.rotRequests, lc.rotPasses = 0, 0, 0
	}
	if begins && lc.lastComplete.IsZero() {
		round = &passCutter{p: &unitPlanner{canList: canList}, budget: lc.o.Budget, chunk: lc.o.Chunk, seg: lc.seg}
	}
	var roundLast []byte
	countRound := func(k []byte) {
		if round != nil && (round.p.keys == 0 || bytes.Compare(k, roundLast) > 0) {
			round.feedRotation(k)
			roundLast = append(roundLast[:0], k...)
			lc.counted++
		}
	}
	rep.Objects, rep.RoundRequests, rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
	rep.LastComplete = lc.lastComplete
	base := rep.Jobs
	prev := lc.prevChunks
	var marks []chunkMark
	complete := false
	var lastKey []byte // the last key this pass took
	// The pass's requests share one bound on those in flight, whichever segment they belong to.
	sem := make(chan struct{}, max(1, par))
	rt := &requestTimes{}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var pending *segmentCheck // the segment whose requests are under way
	// drain ends a failing pass: its requests in flight are called off and waited for (nothing of a
	// pass runs past Check).
	drain := func() {
		cancel()
		if pending != nil {
			<-pending.done
			pending = nil
		}
	}
	for ci := 0; ; ci++ {
		start := lc.now()
		first := ""
		var stop cutKind
		done := false
		for seg := 0; ; seg++ {
			// Plan a segment of the chunk from the reverse table in one read transaction, while the
			// previous segment's requests are under way (the pacer, not the planning, sets the pace).
			t0 := lc.now()
			v, err := ix.acquire()
			if err != nil {
				lc.prevChunks = nil
				drain()
				return nil, err
			}
			stop = cutNone
			n := 0
			cut.p.outside = 0
			if pending != nil {
				cut.p.outside = pending.keys
			}
			done, err = scanReferenced(ctx, v.snap.txn, v.st, after, func(k []byte) bool {
				countRound(k)
				if stop = cut.offer(k); stop != cutNone {
					return false
				}
				if first == "" {
					first = string(k)
				}
				n++
				lastKey = append(lastKey[:0], k...)
				return true
			})
			if n > 0 {
				after = string(lastKey)
			}
			v.release()
			// The segment's stretch of the reverse table is read: its pages need not stay
			// resident while the requests run (a pass over the whole table would otherwise keep
			// the table mapped in full, the mount's largest share of RSS).
			ix.releaseTablePages()
			if err == nil && !done && stop == cutPass && round != nil {
				err = lc.countRest(ctx, string(roundLast), countRound)
			}
			rep.Planning += lc.now().Sub(t0)
			if err != nil {
				lc.prevChunks = nil
				drain()
				return nil, fmt.Errorf("loss check: read the reference index: %w", err)
			}
			if stop == cutSegment {
				cut.endSegment()
			} else {
				cut.endChunk()
			}
			units := cut.p.take()
			if (done || stop == cutPass) && round != nil {
				round.endPass()
				lc.roundObjects, lc.roundRequests, lc.roundPasses = round.p.keys, round.p.made, round.passes
				rep.Objects, rep.RoundRequests, rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
			}
			var alone []string
			if ci == 0 && seg == 0 {
				alone = single
			}
			// This segment's requests start beside the previous one's last (one semaphore bounds
			// both); the previous one's results are taken before the next segment is planned, so a
			// pass holds at most two segments: one planned, one still in flight.
			next := lc.launch(cctx, units, alone, sem, rt)
			if pending != nil {
				if err := lc.finish(rep, pending); err != nil {
					lc.prevChunks = nil
					pending = next
					drain()
					return nil, err
				}
			}
			pending = next
			if stop != cutSegment {
				break
			}
		}
		// A chunk's report waits for every request of the chunk.
		if err := lc.finish(rep, pending); err != nil {
			lc.prevChunks = nil
			return nil, err
		}
		pending = nil
		last := done || stop == cutPass
		if last {
			complete = done
			lc.cursor, lc.rotating = after, !complete
			lc.rotObjects, lc.rotRequests, lc.rotPasses = lc.rotObjects+cut.p.keys, lc.rotRequests+cut.p.made, lc.rotPasses+1
			if complete {
				lc.cursor = ""
				lc.lastComplete = rep.Time
				lc.roundObjects, lc.roundRequests, lc.roundPasses = lc.rotObjects, lc.rotRequests, lc.rotPasses
				rep.Objects, rep.RoundRequests, rep.RoundPasses = lc.roundObjects, lc.roundRequests, max(1, lc.roundPasses)
			}
			rep.Complete, rep.LastComplete = complete, lc.lastComplete
		}
		if !last && lc.o.Progress == nil {
			continue
		}
		out := rep
		if !last {
			cp := *rep
			cp.Partial = true
			out = &cp
		}
		out.Jobs = maps.Clone(base)
		if err := lc.fill(ctx, out, began); err != nil {
			lc.prevChunks = nil
			return nil, err
		}
		end := lc.now()
		rep.LongestChunk = max(rep.LongestChunk, end.Sub(start))
		if first != "" {
			m := chunkMark{first: first, start: start}
			marks = append(marks, m)
			if begins && len(prev) > 0 {
				// A chunk covers a contiguous range of keys (lossplan.go): every object of this chunk
				// the previous pass (a whole rotation) knew was checked there no sooner than the start
				// of the last chunk beginning at or before this chunk's first key (an object before all
				// of them was in the first chunk).
				i := max(0, sort.Search(len(prev), func(i int) bool { return prev[i].first > m.first })-1)
				rep.Revisit = max(rep.Revisit, end.Sub(prev[i].start))
			}
		}
		if !last {
			out.LongestChunk, out.Revisit = rep.LongestChunk, rep.Revisit
			lc.o.Progress(out)
			continue
		}
		break
	}
	rep.Latency = rt.mean()
	if begins && complete {
		lc.prevChunks = marks
	} else {
		lc.prevChunks = nil
		rep.Revisit = 0 // not a whole rotation: the next pass's objects were not all checked by this one
	}
	return rep, nil
}

// fill reports in rep every (object, checkpoint) pair known missing now, per job, and those no earlier
// report named in rep.New. began is the state the pass began with: the referencing checkpoints of each
// missing object are read from the reverse table now and count only as the same records as then.
func (lc *LossChecker) fill(ctx context.Context, rep *LossReport, began *memState) error {
	ix := lc.ix
	rep.Missing, rep.New = []LostReference{}, []LostReference{}
	// A loss counts only for a checkpoint still live as the same record after the stats.
	v, err := ix.acquire()
	if err != nil {
		return err
	}
	lost := []string{}
	for k := range lc.missing {
		lost = append(lost, k)
	}
	sort.Strings(lost)
	refs := make([][]*checkpointRecord, len(lost))
	for i, k := range lost {
		for _, m := range referencingMetas(v.snap.txn, k) {
			c := began.ckpts[m]
			if c == nil || c.Err != "" || v.st.ckpts[m] != c {
				continue
			}
			refs[i] = append(refs[i], c)
		}
	}
	// Flink deletes a subsumed checkpoint's `_metadata` first and its files after: a checkpoint whose
	// `_metadata` is gone from the store by now is being retired (the next sync does it), not broken.
	metaGone := map[string]bool{}
	for _, cs := range refs {
		for _, c := range cs {
			if _, done := metaGone[c.Key]; done {
				continue
			}
			_, err := ix.st.Stat(ctx, c.Key)
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				v.release()
				return fmt.Errorf("loss check: stat %s: %w", c.Key, err)
			}
			metaGone[c.Key] = err != nil
		}
	}
	v.release()
	broken := map[string]bool{}
	seen := map[string]bool{}
	var fresh []int // indexes into rep.Missing of pairs no earlier report named
	for i, k := range lost {
		counted := map[string]bool{}
		for _, c := range refs[i] {
			if metaGone[c.Key] {
				continue
			}
			lr := LostReference{Path: k, Checkpoint: c.Key, Job: c.Job, Since: lc.since[k]}
			rep.Missing = append(rep.Missing, lr)
			j := rep.Jobs[c.Job]
			if !broken[c.Key] {
				broken[c.Key] = true
				j.BrokenCheckpoints++
			}
			if !counted[c.Job] {
				counted[c.Job] = true
				j.MissingObjects++
			}
			rep.Jobs[c.Job] = j
			pair := k + "\x00" + c.Key
			seen[pair] = true
			if !lc.reported[pair] {
				fresh = append(fresh, len(rep.Missing)-1)
			}
		}
	}
	if lc.o.Quarantine != nil {
		// A chunk's report looks up only what it names first (rep.New: the WARN line and the audit
		// record say how to restore it); the pass's own report, every missing object, once per path.
		look := make([]int, 0, len(rep.Missing))
		if rep.Partial {
			look = append(look, fresh...)
		} else {
			for i := range rep.Missing {
				look = append(look, i)
			}
		}
		type found struct {
			q  QuarantinedObject
			ok bool
		}
		seenQ := map[string]found{}
		for _, i := range look {
			p := rep.Missing[i].Path
			f, done := seenQ[p]
			if !done {
				q, ok, err := lc.o.Quarantine.FindQuarantined(ctx, p)
				if err != nil {
					return fmt.Errorf("loss check: look %s up in quarantine: %w", p, err)
				}
				f = found{q, ok}
				seenQ[p] = f
			}
			if f.ok {
				q := f.q
				rep.Missing[i].Quarantine = &q
			}
		}
	}
	for _, i := range fresh {
		rep.New = append(rep.New, rep.Missing[i])
	}
	for p := range lc.reported {
		if !seen[p] {
			delete(lc.reported, p) // back, or no longer referenced: a new loss is reported again
		}
	}
	for p := range seen {
		lc.reported[p] = true
	}
	return nil
}
