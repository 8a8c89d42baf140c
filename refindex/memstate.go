package refindex

import (
	"sort"
	"strconv"
	"strings"
	"time"
)

// memState is the in-memory part of the index: small tables consulted on every decision.
type memState struct {
	ckpts       map[string]*checkpointRecord // _metadata key → record (parseable or not)
	sorted      []string                     // keys of ckpts, sorted (prefix searches for directories)
	unparseable []string                     // sorted keys of records with Err
	// Of those: global (unjudgeable, a trusted writer: every deletion refused), confined (unjudgeable,
	// an untrusted writer: its folder refused), damaged (nothing refused but itself). See badmeta.go.
	global, confined, damaged []string
	unmapped                  []string // sorted keys of records with Unmapped references
	// unproven: base name of an unmapped file reference → the first (sorted) record naming it;
	// unprovenDirs: sorted keys of records with unmapped directory handles (see unprovenFor).
	unproven     map[string]string
	unprovenDirs []string
	inferred     []string            // sorted keys of records with Inferred maps
	jobParents   map[string][]string // job folder name → the folders holding one (see Index.jobParents)
	// Per competition (newestGroup: a job folder and the owner of the _metadata), over the checkpoints
	// that compete for its newest (candidateID): the highest id and the latest completion (mtime).
	// See newest.
	newestID  map[string]int64
	newestMod map[string]time.Time
	// Per savepoint competition (savepointGroup): the latest completion. See newestSavepoint.
	savepointMod map[string]time.Time
	// owners counts, per job folder, the distinct owners of competing checkpoints (for messages).
	owners  map[string]int
	dirRefs map[string]int // file-merging directory key → number of checkpoints naming it
}

func newMemState() *memState {
	return &memState{ckpts: map[string]*checkpointRecord{}, newestID: map[string]int64{}, newestMod: map[string]time.Time{}, savepointMod: map[string]time.Time{}, dirRefs: map[string]int{}}
}

// finish recomputes the derived tables after ckpts changed.
func (s *memState) finish() {
	s.sorted = s.sorted[:0]
	s.unparseable = s.unparseable[:0]
	s.global, s.confined, s.damaged = s.global[:0], s.confined[:0], s.damaged[:0]
	s.unmapped = s.unmapped[:0]
	s.unproven = nil
	s.unprovenDirs = s.unprovenDirs[:0]
	s.inferred = s.inferred[:0]
	s.jobParents = map[string][]string{}
	s.newestID = map[string]int64{}
	s.newestMod = map[string]time.Time{}
	s.savepointMod = map[string]time.Time{}
	s.owners = map[string]int{}
	for k, c := range s.ckpts {
		s.sorted = append(s.sorted, k)
		if c.Err != "" {
			s.unparseable = append(s.unparseable, k)
			switch {
			case c.damaged():
				s.damaged = append(s.damaged, k)
			case c.trustedWriter():
				s.global = append(s.global, k)
			default:
				s.confined = append(s.confined, k)
			}
		}
		if len(c.Inferred) > 0 {
			s.inferred = append(s.inferred, k)
		}
		addJobParent(s.jobParents, k)
		if c.Unmapped > 0 {
			s.unmapped = append(s.unmapped, k)
			if len(c.UnprovenDirs) > 0 {
				s.unprovenDirs = append(s.unprovenDirs, k)
			}
			for b := range c.Unproven {
				if s.unproven == nil {
					s.unproven = map[string]string{}
				}
				if m, ok := s.unproven[b]; !ok || k < m {
					s.unproven[b] = k
				}
			}
		}
		if g, ok := c.savepointGroup(); ok {
			if cur, seen := s.savepointMod[g]; !seen || c.ModTime.After(cur) {
				s.savepointMod[g] = c.ModTime
			}
			continue
		}
		id, ok := c.candidateID()
		if !ok {
			continue
		}
		g := c.newestGroup()
		if _, seen := s.newestID[g]; !seen {
			s.owners[c.Job]++
		}
		if cur, seen := s.newestID[g]; !seen || id > cur {
			s.newestID[g] = id
		}
		// A job resubmitted with a fixed job id (application mode) restarts its ids in the same
		// folder: its new chk-51 is the one it restarts from, not the old chk-100.
		if cur, seen := s.newestMod[g]; !seen || c.ModTime.After(cur) {
			s.newestMod[g] = c.ModTime
		}
	}
	sort.Strings(s.sorted)
	sort.Strings(s.unparseable)
	sort.Strings(s.global)
	sort.Strings(s.confined)
	sort.Strings(s.damaged)
	sort.Strings(s.unmapped)
	sort.Strings(s.unprovenDirs)
	sort.Strings(s.inferred)
}

// inferredRecords returns the sorted keys of records with inferred prefix maps.
func (s *memState) inferredRecords() []string { return s.inferred }

// newest reports whether c is the newest checkpoint of its job folder among the checkpoints of its
// owner: the highest id or the most recently completed. Ties protect every record that has them, so no
// record can take the protection away from another (two checkpoints of a job completed within the same
// mtime tick).
//
// Checkpoints compete only with those of the same owner (newestGroup): a `_metadata` another user
// wrote into the job folder (a chk-<newest+1>/_metadata with a valid id, a copy of the real one with
// its id rewritten) is the newest of ITS owner's checkpoints, so it is protected itself, but it never
// takes the protection away from the job's real newest checkpoint. Only root can give a file away,
// so no other user can make a file look like the job's. The protected set is never smaller than
// when every checkpoint of the folder competed: the folder's highest id and latest completion are
// each the highest and latest of their owner's.
func (s *memState) newest(c *checkpointRecord) bool {
	id, ok := c.candidateID()
	if !ok {
		return false
	}
	g := c.newestGroup()
	return id == s.newestID[g] || c.ModTime.Equal(s.newestMod[g])
}

// newestGroup names the competition for the newest checkpoint c takes part in: its job folder and
// the owner of its `_metadata` ("?" where the store has no owners: S3, where every writer through
// the mount is the mount's own user and anyone else writing needs the bucket's credentials).
func (c *checkpointRecord) newestGroup() string {
	return c.Job + "\x00" + c.owner()
}

// owner returns the uid owning the `_metadata` as a string, "?" when unknown.
func (c *checkpointRecord) owner() string {
	if c.UID == nil {
		return "?"
	}
	return strconv.FormatUint(uint64(*c.UID), 10)
}

// candidateID reports whether c competes for the newest checkpoint of its job folder, and with which id.
// Only a _metadata that Flink could have completed where it lies does: one in a chk-<n> folder whose
// content holds checkpoint id n (or cannot be read, and so is judged by its folder). A copy anywhere else
// (cp -r chk-10 chk-10.bak, a _metadata copied aside to inspect it, the first half of a move done as copy
// and delete, a copy into a made-up chk-11) holds the copied id and a later mtime, and would otherwise take
// the protection away from the checkpoint it copies.
//
// A damaged `_metadata` (Flink could not load it: a JobManager that crashed mid-write, garbage) and
// an unjudgeable one of an untrusted writer never compete: they are no checkpoint the job could
// restart from, so the job's previous good checkpoint stays its newest and keeps its protection.
// An unjudgeable one of the trusted writer (a newer format after a Flink upgrade) competes by its
// folder's id: it is most likely the checkpoint the job restarts from.
func (c *checkpointRecord) candidateID() (int64, bool) {
	if c.Kind == "savepoint" || c.damaged() || c.Err != "" && !c.trustedWriter() {
		return 0, false
	}
	_, folderID, _ := layoutOf(c.Key)
	if folderID < 0 || c.ID != folderID {
		return 0, false
	}
	return folderID, true
}

func (s *memState) clone() *memState {
	n := newMemState()
	for k, v := range s.ckpts {
		n.ckpts[k] = v
	}
	for k, v := range s.dirRefs {
		n.dirRefs[k] = v
	}
	return n
}

// unlisted returns the indexed _metadata keys a listing did not report.
func (s *memState) unlisted(listed map[string]bool) []string {
	var out []string
	for k := range s.ckpts {
		if !listed[k] {
			out = append(out, k)
		}
	}
	return out
}

// below returns the checkpoint keys at or below directory dir ("" = all).
func (s *memState) below(dir string) []string {
	if dir == "" {
		return s.sorted
	}
	p := dir + "/"
	i := sort.SearchStrings(s.sorted, p)
	j := i
	for j < len(s.sorted) && strings.HasPrefix(s.sorted[j], p) {
		j++
	}
	return s.sorted[i:j]
}
