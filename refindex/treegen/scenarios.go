package treegen

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/ckguard/ckguard/refindex/pathnorm"
)

// Job ids of the first incident (32 hex characters, as Flink names job folders).
const (
	IncidentOneOldJob = "e3d8c0a9f1b24d6e8a7b5c3d1e0f9a8b" // cancelled job whose folder was purged
	IncidentOneNewJob = "af8b2e4c6d8f0a1b3c5d7e9f1a2b4c6d" // restored from it, still referencing its SSTs
	// Folder names of the second incident.
	IncidentTwoOldJob = "job_7d83f2a1"
	IncidentTwoNewJob = "job_d29e1b63"
)

// Options tune where scenarios write.
type Options struct {
	// URIPrefix is what Flink wrote for the store root, e.g. "s3://bucket/prefix" when the tree will
	// be uploaded to S3 (the S3 store's own root needs no map); default file:<dir>.
	URIPrefix string
}

func first(o []Options) Options {
	if len(o) > 0 {
		return o[0]
	}
	return Options{}
}

// IncidentOne is the first incident: under flink-checkpoints/, job e3d8… was cancelled 30 days ago
// leaving its retained chk-100271 (and a leftover chk-100270 folder without _metadata); job af8b… was
// restored from it (LEGACY claim mode) and its live chk-100273 and chk-100274 still reference SSTs in
// e3d8…/shared/. The cleanup script purges the old job's folder (Tree.Purge): only the SSTs that
// af8b… references must survive it.
func IncidentOne(dir string, now time.Time, opts ...Options) (*Tree, error) {
	t, err := newTree("incident-one", dir, first(opts).URIPrefix, now)
	if err != nil {
		return nil, err
	}
	base := "flink-checkpoints"
	old, cur := base+"/"+IncidentOneOldJob, base+"/"+IncidentOneNewJob
	t.Purge = old
	day := 24 * time.Hour
	oldSST := uuids("inc1/old/sst", 10)
	oldShared := func(i ...int) []string {
		var out []string
		for _, j := range i {
			out = append(out, old+"/shared/"+oldSST[j])
		}
		return out
	}
	oldT := now.Add(-30 * day)
	// Old job: leftover chk-100270 (its _metadata was subsumed, files left), retained chk-100271.
	for _, n := range uuids("inc1/old/chk-100270", 3) {
		if err := t.Write(old+"/chk-100270/"+n, 2048, oldT.Add(-2*time.Minute)); err != nil {
			return nil, err
		}
	}
	c, err := t.Checkpoint(Spec{Dir: old + "/chk-100271", ID: 100271, Completed: oldT,
		Shared: oldShared(0, 1, 2, 3, 4, 5, 6, 7, 8, 9), Private: uuids("inc1/old/chk-100271", 3)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, oldT.Add(-time.Minute)); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(t.Root, old, "taskowned"), 0o755); err != nil {
		return nil, err
	}
	// New job, restored from chk-100271 ten days ago; RocksDB compaction has since replaced some of
	// the old SSTs: chk-100273 still uses 0–5, chk-100274 uses 0–3.
	newSST := uuids("inc1/new/sst", 6)
	newShared := func(i ...int) []string {
		var out []string
		for _, j := range i {
			out = append(out, cur+"/shared/"+newSST[j])
		}
		return out
	}
	t73 := now.Add(-70 * time.Minute)
	c, err = t.Checkpoint(Spec{Dir: cur + "/chk-100273", ID: 100273, Completed: t73,
		Shared: append(oldShared(0, 1, 2, 3, 4, 5), newShared(0, 1, 2)...), Private: uuids("inc1/new/chk-100273", 2)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, t73.Add(-time.Minute)); err != nil {
		return nil, err
	}
	t74 := now.Add(-10 * time.Minute)
	c, err = t.Checkpoint(Spec{Dir: cur + "/chk-100274", ID: 100274, Completed: t74,
		Shared: append(oldShared(0, 1, 2, 3), newShared(0, 1, 3, 4, 5)...), Private: uuids("inc1/new/chk-100274", 2)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, t74.Add(-time.Minute)); err != nil {
		return nil, err
	}
	// Backdate the new job's first SSTs: uploaded at restore time, still referenced (find -mtime +7).
	for _, k := range newShared(0, 1) {
		if err := t.Touch(k, now.Add(-10*day)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// IncidentTwo is the second incident: checkpoints/job_7d83f2a1 (old job, chk-100..102 retained, 20
// days old) and checkpoints/job_d29e1b63 (current job restored from chk-102 in LEGACY mode, chk-350..352
// live, newest 5 minutes ago) whose checkpoints still reference files of the old job. Purge is the
// old job's folder. All old files are older than 7 days (find -mtime +7 -delete hits them).
func IncidentTwo(dir string, now time.Time, opts ...Options) (*Tree, error) {
	t, err := newTree("incident-two", dir, first(opts).URIPrefix, now)
	if err != nil {
		return nil, err
	}
	base := "checkpoints"
	old, cur := base+"/"+IncidentTwoOldJob, base+"/"+IncidentTwoNewJob
	t.Purge = old
	day := 24 * time.Hour
	oldSST := uuids("inc2/old/sst", 12)
	var prev []string
	for i, id := range []int64{100, 101, 102} {
		// Each checkpoint keeps 6 SSTs of the previous one and adds 2 (incremental).
		shared := append([]string{}, prev...)
		if len(shared) > 6 {
			shared = shared[len(shared)-6:]
		}
		for j := 0; j < 2+2*boolInt(i == 0); j++ {
			shared = append(shared, old+"/shared/"+oldSST[len(prev)+j])
		}
		ct := now.Add(-time.Duration(22-i) * day)
		c, err := t.Checkpoint(Spec{Dir: fmt.Sprintf("%s/chk-%d", old, id), ID: id, Completed: ct, Shared: shared,
			Private: uuids(fmt.Sprintf("inc2/old/chk-%d", id), 2)})
		if err != nil {
			return nil, err
		}
		if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
			return nil, err
		}
		prev = shared
	}
	// The old job's last checkpoint references oldSST 2..7; the new job keeps 2..5 (350), 2..4
	// (351), 2..3 (352).
	newSST := uuids("inc2/new/sst", 8)
	for i, id := range []int64{350, 351, 352} {
		var shared []string
		for j := 2; j < 6-i; j++ {
			shared = append(shared, old+"/shared/"+oldSST[j])
		}
		for j := 0; j < 3+i; j++ {
			shared = append(shared, cur+"/shared/"+newSST[j])
		}
		ct := now.Add(-time.Duration(2*(2-i))*time.Hour - 5*time.Minute)
		c, err := t.Checkpoint(Spec{Dir: fmt.Sprintf("%s/chk-%d", cur, id), ID: id, Completed: ct, Shared: shared,
			Private: uuids(fmt.Sprintf("inc2/new/chk-%d", id), 2)})
		if err != nil {
			return nil, err
		}
		if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
			return nil, err
		}
	}
	for j := 0; j < 3; j++ {
		if err := t.Touch(cur+"/shared/"+newSST[j], now.Add(-9*day)); err != nil {
			return nil, err
		}
	}
	return t, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// SavepointsRelative writes savepoints/ with two canonical savepoints whose files are relative
// handles, one old unreferenced file inside a savepoint folder, and a checkpoint of the same job
// that references nothing of the savepoints. Deleting a savepoint's _metadata retires it.
func SavepointsRelative(dir string, now time.Time, opts ...Options) (*Tree, error) {
	t, err := newTree("savepoints-relative", dir, first(opts).URIPrefix, now)
	if err != nil {
		return nil, err
	}
	day := 24 * time.Hour
	for i, name := range []string{"savepoint-4f1a2b-0a1b2c3d4e5f", "savepoint-4f1a2b-9f8e7d6c5b4a"} {
		ct := now.Add(-time.Duration(40-10*i) * day)
		c, err := t.Checkpoint(Spec{Dir: "savepoints/" + name, ID: int64(500 + i), Savepoint: true, Completed: ct,
			Private: uuids("sp/"+name, 4)})
		if err != nil {
			return nil, err
		}
		if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
			return nil, err
		}
	}
	if err := t.Write("savepoints/savepoint-4f1a2b-0a1b2c3d4e5f/"+uuids("sp/stray", 1)[0], 100, now.Add(-41*day)); err != nil {
		return nil, err
	}
	job := "flink/4f1a2b3c4d5e6f708192a3b4c5d6e7f8"
	ct := now.Add(-2 * time.Hour)
	c, err := t.Checkpoint(Spec{Dir: job + "/chk-9", ID: 9, Completed: ct, Shared: prefixAll(job+"/shared/", uuids("sp/job/sst", 3)),
		Private: uuids("sp/job/chk-9", 1)})
	if err != nil {
		return nil, err
	}
	return t, t.Data(c, ct.Add(-time.Minute))
}

func prefixAll(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// EntropyKey is the s3.entropy.key the entropy scenario uses.
const EntropyKey = "_entropy_"

// Entropy writes a store as S3 with entropy injection leaves it (store root = the bucket): Flink's
// checkpoint dir is s3://ckpt-bucket/_entropy_/flink, so data files sit under random 4-character
// prefixes (<rand>/flink/<job>/shared/…, <rand>/flink/<job>/chk-N/…, absolute handles) and each
// `_metadata` at the entropy-free flink/<job>/chk-N/_metadata. The index needs
// --map s3://ckpt-bucket/_entropy_/flink=_entropy_/flink --entropy-key _entropy_ (Tree.Maps).
// chk-41 was subsumed: its private files are garbage.
func Entropy(dir string, now time.Time) (*Tree, error) {
	t, err := newTree("entropy", dir, "s3://ckpt-bucket", now)
	if err != nil {
		return nil, err
	}
	t.EntropyKey = EntropyKey
	t.Maps = []pathnorm.Mapping{{From: "s3://ckpt-bucket/" + EntropyKey + "/flink", To: EntropyKey + "/flink"}}
	r := rng("entropy")
	ent := func() string {
		const abc = "abcdefghijklmnopqrstuvwxyz0123456789"
		b := make([]byte, 4)
		for i := range b {
			b[i] = abc[r.IntN(len(abc))]
		}
		return string(b)
	}
	job := "5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e5e"
	sst := make([]string, 8)
	for i := range sst {
		sst[i] = ent() + "/flink/" + job + "/shared/" + uuidOf(fmt.Sprintf("ent/sst/%d", i))
	}
	day := 24 * time.Hour
	for i, id := range []int64{41, 42, 43} {
		var priv []string
		for j := 0; j < 2; j++ {
			priv = append(priv, ent()+"/flink/"+job+fmt.Sprintf("/chk-%d/", id)+uuidOf(fmt.Sprintf("ent/%d/%d", id, j)))
		}
		ct := now.Add(-time.Duration(3-i) * day)
		c, err := t.Checkpoint(Spec{Dir: fmt.Sprintf("flink/%s/chk-%d", job, id), ID: id, Completed: ct,
			Shared: sst[i*2 : i*2+4], AbsolutePrivate: priv})
		if err != nil {
			return nil, err
		}
		// Flink writes entropy URIs (s3://ckpt-bucket/<rand>/flink/…) — rewrite through the map form.
		if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
			return nil, err
		}
	}
	return t, t.Retire(fmt.Sprintf("flink/%s/chk-41/_metadata", job))
}

// SchemeAliasing writes two jobs on "S3": job A wrote its checkpoints as s3a://bucket/flink/…
// (Hadoop S3 plugin), job B was restored from A with the Presto plugin and references A's SSTs as
// s3p://bucket/flink/…; one more reference names a different bucket (outside the guarded store).
// The index needs --map s3://bucket/flink= (Tree.Maps): every alias is the same object.
func SchemeAliasing(dir string, now time.Time) (*Tree, error) {
	t, err := newTree("scheme-aliasing", dir, "s3a://bucket/flink", now)
	if err != nil {
		return nil, err
	}
	t.Maps = []pathnorm.Mapping{{From: "s3://bucket/flink", To: ""}}
	t.External = []string{"s3://other-bucket"}
	a, b := "aaaa0000aaaa0000aaaa0000aaaa0000", "bbbb1111bbbb1111bbbb1111bbbb1111"
	day := 24 * time.Hour
	aSST := prefixAll(a+"/shared/", uuids("alias/a", 6))
	ct := now.Add(-20 * day)
	c, err := t.Checkpoint(Spec{Dir: a + "/chk-7", ID: 7, Completed: ct, Shared: aSST, Private: uuids("alias/a/chk-7", 1)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
		return nil, err
	}
	var shared []string
	for _, k := range aSST[:3] {
		shared = append(shared, "s3p://bucket/flink/"+k)
	}
	bSST := prefixAll(b+"/shared/", uuids("alias/b", 2))
	for _, k := range bSST {
		shared = append(shared, "s3p://bucket//flink/"+k+"/") // sloppy slashes, as hand-written configs produce
	}
	shared = append(shared, "s3a://other-bucket/flink/x/shared/"+uuids("alias/outside", 1)[0])
	ct = now.Add(-30 * time.Minute)
	if _, err := t.Checkpoint(Spec{Dir: b + "/chk-8", ID: 8, Completed: ct, Shared: shared, Private: uuids("alias/b/chk-8", 1)}); err != nil {
		return nil, err
	}
	cb := t.Live[b+"/chk-8/_metadata"]
	// Ground truth in store keys (the checkpoint recorded the URIs as written).
	cb.Refs = append(append(append([]string{}, aSST[:3]...), bSST...), b+"/chk-8/"+uuids("alias/b/chk-8", 1)[0])
	cb.Outside = []string{"s3://other-bucket/flink/x/shared/" + uuids("alias/outside", 1)[0]}
	if err := t.Data(cb, ct.Add(-time.Minute)); err != nil {
		return nil, err
	}
	return t, nil
}

// Unparseable writes a small healthy job plus one chk-N/_metadata with a damaged (truncated) body,
// followed by a newer healthy checkpoint: the damaged file is no checkpoint Flink could restore, so it
// protects nothing (its files go unless another checkpoint references them) and refuses nothing else.
func Unparseable(dir string, now time.Time, opts ...Options) (*Tree, error) {
	t, err := newTree("unparseable", dir, first(opts).URIPrefix, now)
	if err != nil {
		return nil, err
	}
	job := "flink/0123456789abcdef0123456789abcdef"
	day := 24 * time.Hour
	ct := now.Add(-3 * day)
	c, err := t.Checkpoint(Spec{Dir: job + "/chk-1", ID: 1, Completed: ct, Shared: prefixAll(job+"/shared/", uuids("unp/sst", 2)),
		Private: uuids("unp/chk-1", 1)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
		return nil, err
	}
	if err := t.Write(job+"/shared/"+uuids("unp/orphan", 1)[0], 10, now.Add(-10*day)); err != nil {
		return nil, err
	}
	// chk-2: a valid encoding cut in half (a crashed non-atomic writer).
	c2, err := t.Checkpoint(Spec{Dir: job + "/chk-2", ID: 2, Completed: now.Add(-2 * day), Shared: prefixAll(job+"/shared/", uuids("unp/sst2", 2))})
	if err != nil {
		return nil, err
	}
	p := filepath.Join(t.Root, filepath.FromSlash(c2.Metadata))
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, err
	}
	if err := t.WriteBytes(c2.Metadata, b[:len(b)/2], now.Add(-2*day)); err != nil {
		return nil, err
	}
	delete(t.Live, c2.Metadata)
	t.Unparseable = append(t.Unparseable, c2.Metadata)
	// chk-3 completed after it (a damaged chk-N is never its job's newest anyway).
	c3, err := t.Checkpoint(Spec{Dir: job + "/chk-3", ID: 3, Completed: now.Add(-1 * day), Shared: prefixAll(job+"/shared/", uuids("unp/sst", 2)),
		Private: uuids("unp/chk-3", 1)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c3, now.Add(-1*day-time.Minute)); err != nil {
		return nil, err
	}
	return t, nil
}

// YoungOrphan writes a job with one live checkpoint, an old orphan SST (garbage) and a fresh
// unreferenced SST written 5 minutes ago (an in-flight checkpoint's upload: protected by --grace).
func YoungOrphan(dir string, now time.Time, opts ...Options) (*Tree, error) {
	t, err := newTree("young-orphan", dir, first(opts).URIPrefix, now)
	if err != nil {
		return nil, err
	}
	job := "flink/fedcba9876543210fedcba9876543210"
	ct := now.Add(-8 * 24 * time.Hour)
	c, err := t.Checkpoint(Spec{Dir: job + "/chk-77", ID: 77, Completed: ct, Shared: prefixAll(job+"/shared/", uuids("yo/sst", 3)),
		Private: uuids("yo/chk-77", 1)})
	if err != nil {
		return nil, err
	}
	if err := t.Data(c, ct.Add(-time.Minute)); err != nil {
		return nil, err
	}
	if err := t.Write(job+"/shared/"+uuids("yo/old", 1)[0], 100, now.Add(-3*24*time.Hour)); err != nil {
		return nil, err
	}
	if err := t.Write(job+"/shared/"+uuids("yo/young", 1)[0], 100, now.Add(-5*time.Minute)); err != nil {
		return nil, err
	}
	return t, nil
}
