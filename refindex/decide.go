package refindex

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strconv"
	"strings"
	"time"

	badger "github.com/dgraph-io/badger/v4"

	"github.com/ckguard/ckguard/internal/duration"
	"github.com/ckguard/ckguard/refindex/flinklayout"
	"github.com/ckguard/ckguard/refindex/store"
	"github.com/ckguard/ckguard/refindex/verdict"
)

// maxNamed is how many referencing checkpoints a decision names; RefCount has the total.
const maxNamed = 5

// maxRefScan bounds how many reverse entries a directory decision reads to count the distinct
// referencing checkpoints; beyond it RefCount is a lower bound (the decision is a refusal anyway).
const maxRefScan = 200_000

// Decide answers whether op may happen to path (a store key). Rules, in this order: a stale index or
// a failed sync refuses everything; a `_metadata` that cannot be parsed refuses nothing but itself when
// it is damaged (Flink cannot load it either), and when its references cannot be judged (newer
// format, too large) every operation but on itself where its writer is trusted for its job folder,
// else those in its own folder (badmeta.go); a live `_metadata` referencing an object by a URI that no mapping ties to the store,
// the store does not place and no --external declares (resolveOutside) refuses every file with that
// URI's name and every folder holding one; objects referenced by a live checkpoint/savepoint are
// refused; what Flink's REST API reports a job not terminated needs (its folders, restore point and
// latest checkpoint; fail closed in scope while an endpoint does not answer: flinkjobs.go) is refused;
// protected `_metadata` (pinned, newest checkpoint of an active job, newest savepoint of a
// job, savepoint within --savepoint-retention) is refused; --protect
// globs are refused; unreferenced objects younger than --grace are refused (except OpLink,
// OpChmod and OpAppend); everything else is allowed. For a directory (OpRmdir, OpRename/OpReplace/OpChmod of a
// directory) the answer covers everything below it. Errors refuse.
//
// seen is what the caller (a mount) has just observed of p, if anything: a stat through the folder
// descriptor the change then acts through, or the S3 version its conditional request names. The
// decision then judges that object (store.StatObserved), not another look by path that could find
// another file. Only an observation whose Path is p's key counts.
func (ix *Index) Decide(ctx context.Context, p string, op verdict.Op, seen ...store.ObjectInfo) verdict.Decision {
	key, err := store.CleanKey(p)
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %q: %v", op, p, err))
	}
	v, err := ix.acquire()
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: %v", op, key, err))
	}
	defer v.release()
	if v.filt == nil {
		v.g.filtOnce.Do(func() { ix.startFilter(v.g) })
	}
	return ix.decide(ctx, v, key, op, maxNamed, observation(key, seen))
}

// observation returns the observation of key among seen, nil when there is none.
func observation(key string, seen []store.ObjectInfo) *store.ObjectInfo {
	for i := range seen {
		if seen[i].Path == key {
			return &seen[i]
		}
	}
	return nil
}

// stat describes key for a decision: what the caller observed of it (seen, judged through
// store.StatObserved) or else the store's own look.
func (ix *Index) stat(ctx context.Context, key string, seen *store.ObjectInfo) (store.ObjectInfo, error) {
	if seen != nil {
		return store.StatObserved(ctx, ix.st, *seen)
	}
	return ix.st.Stat(ctx, key)
}

func refuse(r verdict.Reason, msg string) verdict.Decision {
	return verdict.Decision{Reason: r, Message: msg}
}

func orRoot(k string) string {
	if k == "" {
		return "the store root"
	}
	return k
}

// parentKey returns the directory holding key ("" for a key at the store root).
func parentKey(key string) string {
	if i := strings.LastIndexByte(key, '/'); i >= 0 {
		return key[:i]
	}
	return ""
}

func (ix *Index) decide(ctx context.Context, v *view, key string, op verdict.Op, limit int, seen *store.ObjectInfo) verdict.Decision {
	now := v.now()
	what := key
	if what == "" {
		what = "the store root"
	}
	// 1. Fail closed when the view of storage may be old.
	if v.syncErr != "" {
		return refuse(verdict.ReasonSyncFailed, fmt.Sprintf("refusing to %s %s: the last index sync failed (%s); the guard fails closed until a sync succeeds: fix the cause (a running mount retries every --sync-interval; `ckguard index sync` shows its last error, or syncs an index no mount holds)", op, what, v.syncErr))
	}
	if v.last.IsZero() {
		return refuse(verdict.ReasonIndexStale, fmt.Sprintf("refusing to %s %s: the index has not completed a sync of the store yet; run `ckguard index rebuild` (or wait for the mount's first sync)", op, what))
	}
	if v.remap && v.interrupted {
		return refuse(verdict.ReasonIndexStale, fmt.Sprintf("refusing to %s %s: the index was stopped in the middle of writing a sync, so it holds part of the old and part of the new state; the next sync (`ckguard index sync`, or the mount's periodic one) rebuilds it", op, what))
	}
	if v.remap {
		return refuse(verdict.ReasonIndexStale, fmt.Sprintf("refusing to %s %s: the path mapping (--map, --entropy-key, store root) changed since the index was built, so its keys may name other objects; run `ckguard index sync` (it rebuilds the index)", op, what))
	}
	if v.pol.MaxStaleness > 0 && now.Sub(v.last) > v.pol.MaxStaleness {
		return refuse(verdict.ReasonIndexStale, fmt.Sprintf("refusing to %s %s: the index was last synced %s ago, more than --max-staleness %s; a running mount syncs every --sync-interval, so its syncs are not completing: `ckguard index sync` shows why (or syncs an index no mount holds)", op, what,
			duration.Format(now.Sub(v.last).Round(time.Second)), duration.Format(v.pol.MaxStaleness)))
	}
	// Ages of store modification times are measured by the store's clock where it is behind this host's.
	storeNow := v.storeNow(now)
	isDir := op == verdict.OpRmdir
	maybeDir := isDir || op == verdict.OpRename || op == verdict.OpReplace || op == verdict.OpChmod
	// Every rule applies to every op, OpWrite and OpLink included: they remove nothing, but an
	// unknown set of references (rules 2, 2b) could include the file, and overwriting or punching
	// holes into an in-flight file (rule 6) destroys a checkpoint being written. OpLink only adds a
	// name, so rule 6 does not apply to it.
	st := v.st

	// 2. A `_metadata` that cannot be parsed (badmeta.go). A damaged one (Flink cannot load it
	// either) refuses nothing here: it is no live checkpoint; rules 4–6 keep it while young. One whose
	// references cannot be judged although Flink may load it (a newer format version, over the size
	// limit, an unaddressable key) may reference anything: from a writer the store trusts for its job
	// folder it refuses everything; from another writer only what lies in its own folder. Deleting
	// the file itself is not refused here (it is how the user fixes it), but rules 3–6 still apply.
	if len(st.global) > 0 {
		self := false
		for _, u := range st.global {
			if u == key && !isDir {
				self = true
			}
		}
		if !self {
			u := st.global[0]
			more := ""
			if n := len(st.global); n > 1 {
				more = fmt.Sprintf(" (and %d more such _metadata)", n-1)
			}
			return verdict.Decision{Reason: verdict.ReasonUnparseable, Referencing: []string{u}, RefCount: len(st.global),
				Message: fmt.Sprintf("refusing to %s %s: %s cannot be parsed (%s; %s)%s, and its writer is trusted for its job folder, so it may be a live checkpoint whose references lie anywhere; inspect it with `%s`, delete or replace it (or upgrade ckguard when it is a newer format), then run `ckguard index sync`", op, what, u, badClassText(st.ckpts[u]), st.ckpts[u].Err, more, inspectHint(ix.st.Root(), u))}
		}
	}
	if len(st.confined) > 0 {
		if u := st.confinedFor(key, isDir, maybeDir); u != "" {
			return verdict.Decision{Reason: verdict.ReasonUnparseable, Referencing: []string{u}, RefCount: 1,
				Message: fmt.Sprintf("refusing to %s %s: %s in the same folder cannot be parsed (%s; %s), so what it references there is unknown; its writer does not own the job folder, so only its folder %s is refused: delete it (allowed once past --grace), then run `ckguard index sync`", op, what, u, badClassText(st.ckpts[u]), st.ckpts[u].Err, confinedScope(u))}
		}
	}

	// 2b. A live _metadata references an object by a URI that neither a mapping nor the store places
	// (resolveOutside): any store file that could be that object is refused.
	if len(st.unmapped) > 0 {
		if d, refused := ix.decideUnmapped(ctx, v, key, op, what, maybeDir, seen); refused {
			return d
		}
	}

	// 2c. An entry the last sync could not read: refused in the smallest scope that holds what it
	// may hide (unknown.go).
	if len(v.unknown) > 0 {
		if d, refused := ix.decideUnknown(v, key, op, what, maybeDir); refused {
			return d
		}
	}

	// 3. Referenced by a live checkpoint or savepoint (directly, or by a directory handle).
	refs, n, bounded, err := ix.referencing(v, key, maybeDir, limit)
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: reading the index: %v", op, what, err))
	}
	if n > 0 {
		count := strconv.Itoa(n)
		if bounded {
			count = "at least " + count
		}
		where := what
		if maybeDir && !ix.refsSelf(v, key) {
			where = what + " (something below it)"
		}
		// Built without fmt: this is the hot path of a refused deletion.
		var b strings.Builder
		b.Grow(320 + len(where) + len(refs)*96)
		b.WriteString("refusing to ")
		b.WriteString(op.String())
		b.WriteByte(' ')
		b.WriteString(where)
		b.WriteString(": referenced by ")
		b.WriteString(count)
		b.WriteString(" live checkpoint(s)/savepoint(s): ")
		writeCheckpoints(&b, refs, n)
		b.WriteString("; they need it to restore. ")
		sp, ck := st.referencingKinds(refs)
		if ck {
			b.WriteString("Retire the checkpoints first (delete their _metadata, or let Flink subsume them), or take a full checkpoint of the job (`flink checkpoint <job-id> -full`) so newer checkpoints stop referencing it")
		}
		if sp {
			if ck {
				b.WriteString("; ")
			}
			// A savepoint is never subsumed and a full checkpoint does not release it: it is needed
			// as a whole until someone disposes of it.
			b.WriteString("A savepoint needs its files as a whole until it is disposed of: dispose of the savepoint on purpose (`flink savepoint -d <savepoint path>`, or delete its _metadata through the mount, which retires it when the policy allows), then its files can go")
		}
		return verdict.Decision{Reason: verdict.ReasonReferenced, Referencing: refs, RefCount: n, Message: b.String()}
	}

	// 3b. What Flink's REST API reports running (flinkjobs.go): a job's folders, restore point and
	// latest checkpoint, whatever their age; fail closed in scope while an endpoint does not answer.
	if d, refused := ix.decideFlink(v, key, op, what, maybeDir, storeNow); refused {
		return d
	}

	// 4. Protected _metadata: pinned, the newest checkpoint of an active job, a protected savepoint.
	cands := []string{key}
	if maybeDir {
		cands = append(cands, st.below(key)...)
		for p := range v.pins {
			if key == "" || strings.HasPrefix(p, key+"/") {
				cands = append(cands, p)
			}
		}
	}
	for _, k := range cands {
		if why := v.pinUnknown(k); why != "" && st.ckpts[k] != nil {
			// Fail closed in the pins' scope: a pin made on another mount may hold this checkpoint.
			return verdict.Decision{Reason: verdict.ReasonPinned, Referencing: []string{k}, RefCount: 1,
				Message: fmt.Sprintf("refusing to %s %s: %s may be pinned from another mount: %s; it is not retired until its pin is read (see `ckguard fleet`)", op, what, k, why)}
		}
		if t, ok := v.pins[k]; ok {
			return verdict.Decision{Reason: verdict.ReasonPinned, Referencing: []string{k}, RefCount: 1,
				Message: fmt.Sprintf("refusing to %s %s: %s is pinned (since %s); run `ckguard unpin %s` first", op, what, k, t.UTC().Format(time.RFC3339), path.Dir(k))}
		}
		c := st.ckpts[k]
		if c == nil {
			continue
		}
		if r, why := v.protection(c, storeNow); r != "" {
			return verdict.Decision{Reason: r, Referencing: []string{k}, RefCount: 1,
				Message: fmt.Sprintf("refusing to %s %s: %s", op, what, why)}
		}
	}

	// 4c. ForSt working directories of active jobs (forst.go), whatever the files' age.
	if d, refused := ix.decideForst(ctx, v, key, op, what, storeNow); refused {
		return d
	}

	// 5. --protect globs.
	if g := v.pol.protectedBy(key); g != "" {
		return refuse(verdict.ReasonProtectGlob, fmt.Sprintf("refusing to %s %s: it matches --protect %q", op, what, g))
	}
	if op == verdict.OpLink || op == verdict.OpChmod || op == verdict.OpAppend {
		// None removes or rewrites anything, so an in-flight file (rule 6) is not at risk: cp -a and
		// rsync -a set the modes of the files they have just written, and an append continues a file
		// its own writer has just written (a young file by definition).
		return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed, Message: op.String() + " " + what + ": referenced by no live checkpoint"}
	}

	// 6. In-flight files: unreferenced but young.
	oi, err := ix.stat(ctx, key, seen)
	if errors.Is(err, fs.ErrNotExist) {
		return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed, Message: op.String() + " " + what + ": no such object in the store"}
	}
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: cannot stat it in the store: %v", op, what, err))
	}
	if oi.IsDir {
		var blocked *verdict.Decision
		werr := ix.st.Walk(ctx, key, func(o store.ObjectInfo) error {
			// Directories too (where the backend reports them): an empty folder can match a glob.
			if g := v.pol.protectedBy(o.Path); g != "" {
				d := refuse(verdict.ReasonProtectGlob, fmt.Sprintf("refusing to %s %s: %s below it matches --protect %q", op, what, o.Path, g))
				blocked = &d
				return errStop
			}
			if o.IsDir {
				return nil
			}
			if d, refused := ix.flinkBelow(v, o, op, what, storeNow); refused {
				blocked = &d
				return errStop
			}
			if d, refused := ix.forstBelow(ctx, v, o, op, what, storeNow); refused {
				blocked = &d
				return errStop
			}
			if young, age := ix.inGrace(v, o, storeNow); young {
				d := refuse(verdict.ReasonGrace, v.graceMsg(op, what, o.Path, age))
				blocked = &d
				return errStop
			}
			return nil
		})
		if blocked != nil {
			return *blocked
		}
		if werr != nil {
			return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: listing it in the store: %v", op, what, werr))
		}
		return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed, Message: fmt.Sprintf("%s %s: nothing below it is referenced or protected", op, what)}
	}
	if young, age := ix.inGrace(v, oi, storeNow); young {
		return refuse(verdict.ReasonGrace, v.graceMsg(op, what, key, age))
	}
	return verdict.Decision{Allow: true, Reason: verdict.ReasonAllowed, Message: op.String() + " " + what + ": referenced by no live checkpoint, older than --grace " + v.pol.Grace.String()}
}

var errStop = errors.New("stop")

// decideUnmapped refuses op on key when key, or (for a directory) a file below it, could be an object
// a live checkpoint references by a URI no mapping ties to the store (memState.unprovenFor).
func (ix *Index) decideUnmapped(ctx context.Context, v *view, key string, op verdict.Op, what string, maybeDir bool, seen *store.ObjectInfo) (verdict.Decision, bool) {
	st := v.st
	refusal := func(obj, meta, uri string) (verdict.Decision, bool) {
		which := "a file named " + path.Base(obj)
		if len(st.unprovenDirs) > 0 {
			which = "anything in the store"
		}
		if obj != key {
			what += " (" + obj + " below it)"
		}
		return verdict.Decision{Reason: verdict.ReasonUnmappedReferences, Referencing: []string{meta}, RefCount: len(st.unmapped),
			Message: fmt.Sprintf("refusing to %s %s: %s references %s, which no --map ties to the guarded store and which the store does not hold at the same relative place, so %s may be it; %s", op, what, meta, uri, which, ix.unmappedFix(meta, uri))}, true
	}
	if meta, uri, ok := st.unprovenFor(key); ok {
		return refusal(key, meta, uri)
	}
	if !maybeDir {
		return verdict.Decision{}, false
	}
	oi, err := ix.stat(ctx, key, seen)
	if errors.Is(err, fs.ErrNotExist) || err == nil && !oi.IsDir {
		return verdict.Decision{}, false
	}
	if err != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: cannot stat it in the store: %v", op, what, err)), true
	}
	var hit *store.ObjectInfo
	werr := ix.st.Walk(ctx, key, func(o store.ObjectInfo) error {
		if _, _, ok := st.unprovenFor(o.Path); ok && !o.IsDir {
			hit = &o
			return errStop
		}
		return nil
	})
	if hit != nil {
		meta, uri, _ := st.unprovenFor(hit.Path)
		return refusal(hit.Path, meta, uri)
	}
	if werr != nil {
		return refuse(verdict.ReasonStoreError, fmt.Sprintf("refusing to %s %s: listing it in the store: %v", op, what, werr)), true
	}
	return verdict.Decision{}, false
}

func (v *view) graceMsg(op verdict.Op, what, file string, age time.Duration) string {
	clock := ""
	if v.skew != 0 {
		clock = fmt.Sprintf(" (by the store's clock, which is or was %s behind this host's)", (-v.skew).Round(time.Second))
	}
	return fmt.Sprintf("refusing to %s %s: %s is referenced by no checkpoint but was modified %s ago%s, within --grace %s, so it may belong to a checkpoint still being written; retry after %s", op, what, file, age.Round(time.Second), clock, v.pol.Grace, (v.pol.Grace - age).Round(time.Second))
}

// inGrace reports whether an unreferenced file is young enough to belong to an in-flight
// checkpoint. A live `_metadata` (its checkpoint is complete) and files whose referencing checkpoint
// was retired (a tombstone that lifts grace from this file: see tombstoneLifts) are not in flight.
func (ix *Index) inGrace(v *view, o store.ObjectInfo, now time.Time) (bool, time.Duration) {
	age := now.Sub(o.ModTime)
	// --grace 0 switches the rule off. Without the explicit check a file modified a moment after `now`
	// was read (a concurrent writer) has a negative age and would count as "within 0s".
	if v.pol.Grace <= 0 || age >= v.pol.Grace {
		return false, age
	}
	if c := v.st.ckpts[o.Path]; c != nil && c.Err == "" {
		return false, age
	}
	it, err := v.snap.txn.Get(tombKey(o.Path))
	if err != nil {
		return true, age
	}
	lifts := false
	if err := it.Value(func(b []byte) error { lifts = tombstoneLifts(b, o); return nil }); err != nil {
		return true, age
	}
	return !lifts, age
}

// referencingKinds reports whether the referencing _metadata keys refs include savepoints and
// checkpoints (anything that is no savepoint).
func (s *memState) referencingKinds(refs []string) (savepoints, checkpoints bool) {
	for _, r := range refs {
		if c := s.ckpts[r]; c != nil && c.Kind == "savepoint" {
			savepoints = true
		} else {
			checkpoints = true
		}
	}
	return savepoints, checkpoints
}

// refsSelf reports whether key itself (not only something below it) is referenced.
func (ix *Index) refsSelf(v *view, key string) bool {
	refs, n, _, _ := ix.referencing(v, key, false, 1)
	return n > 0 && len(refs) > 0
}

// referencing returns the first limit distinct checkpoints referencing key (and, if below, anything
// under key as a directory) and their total count; bounded reports a count cut off at maxRefScan.
func (ix *Index) referencing(v *view, key string, below bool, limit int) (names []string, n int, bounded bool, err error) {
	// A file's reverse entries name each checkpoint once; only scans of several objects (directories,
	// directory handles) need de-duplication.
	var seen map[string]bool
	add := func(meta []byte, dedupe bool) {
		if dedupe {
			if seen == nil {
				seen = map[string]bool{}
			}
			if seen[string(meta)] {
				return
			}
			seen[string(meta)] = true
		}
		n++
		if len(names) < limit {
			names = append(names, string(meta))
		}
	}
	scanned := 0
	txn := v.snap.txn
	err = func() error {
		scan := func(prefix []byte, tbl string, dedupe bool) {
			var it *badger.Iterator
			if tbl == tblReverse {
				it = v.snap.reverseIterator()
				defer v.snap.putIterator(it)
			} else {
				it = txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
				defer it.Close()
			}
			for it.Seek(prefix); it.ValidForPrefix(prefix); it.Next() {
				k := it.Item().Key()
				if i := pairSep(k[len(tbl):]); i >= 0 {
					add(k[len(tbl)+i+1:], dedupe)
				}
				if scanned++; scanned >= maxRefScan {
					bounded = true
					return
				}
			}
		}
		// The filter proves most unreferenced files have no reverse entry without touching badger.
		if key != "" && !v.filt.unreferenced(key, v.snap.seq) {
			scan(append([]byte(tblReverse+key), 0), tblReverse, below || len(v.st.dirRefs) > 0)
		}
		if below && !bounded {
			p := tblReverse
			if key != "" {
				p += key + "/"
			}
			scan([]byte(p), tblReverse, true)
		}
		// File-merging directory handles naming key, an ancestor of it, or (for a directory) something below.
		if len(v.st.dirRefs) > 0 {
			for a := key; ; {
				if v.st.dirRefs[a] > 0 {
					scan(append([]byte(tblDir+a), 0), tblDir, true)
				}
				// Up to and including the store root ("" is a directory handle too).
				if a == "" {
					break
				}
				a = parentKey(a)
			}
			if below {
				for d := range v.st.dirRefs {
					if key == "" || strings.HasPrefix(d, key+"/") {
						scan(append([]byte(tblDir+d), 0), tblDir, true)
					}
				}
			}
		}
		return nil
	}()
	return names, n, bounded, err
}

func listCheckpoints(refs []string, n int) string {
	var b strings.Builder
	writeCheckpoints(&b, refs, n)
	return b.String()
}

// writeCheckpoints names the checkpoint folders of refs ("a/chk-1, b/chk-2 and 3 more").
func writeCheckpoints(b *strings.Builder, refs []string, n int) {
	for i, r := range refs {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strings.TrimSuffix(r, "/"+flinklayout.MetadataName))
	}
	if n > len(refs) {
		b.WriteString(" and ")
		b.WriteString(strconv.Itoa(n - len(refs)))
		b.WriteString(" more")
	}
}

// Explain reports a path's state (StateReferenced, StateProtected, StateInGrace, StateDeletable or
// StateBlocked) and the checkpoints that reference it (up to 100), for the user.ckguard.* xattrs.
func (ix *Index) Explain(ctx context.Context, p string) (state string, referencing []string, err error) {
	key, err := store.CleanKey(p)
	if err != nil {
		return "", nil, err
	}
	v, err := ix.acquire()
	if err != nil {
		return "", nil, err
	}
	defer v.release()
	op := verdict.OpUnlink
	if oi, err := ix.st.Stat(ctx, key); err == nil && oi.IsDir {
		op = verdict.OpRmdir
	}
	d := ix.decide(ctx, v, key, op, 100, nil)
	return stateOf(d.Reason), d.Referencing, nil
}

func stateOf(r verdict.Reason) string {
	switch r {
	case verdict.ReasonAllowed:
		return verdict.StateDeletable
	case verdict.ReasonReferenced:
		return verdict.StateReferenced
	case verdict.ReasonProtectedMetadata, verdict.ReasonProtectedSavepoint, verdict.ReasonPinned, verdict.ReasonProtectGlob, verdict.ReasonForStWorkingDir, verdict.ReasonFlinkRunning:
		return verdict.StateProtected
	case verdict.ReasonGrace:
		return verdict.StateInGrace
	}
	return verdict.StateBlocked
}

// inspectHint is a shell command that decodes the _metadata at key, as the user can paste it: the
// file under a local store's directory, or the object piped from the AWS CLI for an S3 store (a key
// alone names nothing the shell can open).
func inspectHint(root, key string) string {
	if strings.Contains(root, "://") {
		uri := strings.TrimSuffix(root, "/") + "/" + key
		return "aws s3 cp " + shellQuote(uri) + " - | ckguard inspect --location " + shellQuote(uri) + " -"
	}
	return "ckguard inspect " + shellQuote(path.Join(root, key))
}

// shellQuote returns s as one shell word: unchanged when it holds only characters no shell treats
// specially, else single-quoted.
func shellQuote(s string) string {
	safe := s != ""
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./:=+,@%", r)) {
			safe = false
			break
		}
	}
	if safe {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
