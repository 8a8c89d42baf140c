package treegen

import (
	"fmt"
	"path"
	"time"
)

// ForStSpec describes a Flink 2.x job with ForSt state (disaggregated state) to generate.
type ForStSpec struct {
	// JobID is the job id in hex (32 digits); its job folder is flink/<JobID>.
	JobID string
	// Newest is when the job's newest checkpoint (chk-12) completed; zero: the job has none.
	Newest time.Time
	// WorkingMTime is the modification time of every file in its working folders.
	WorkingMTime time.Time
	// Primary is the store-relative ForSt primary dir; "" is the default (the checkpoint dir: the working
	// folders lie in the job's shared folder).
	Primary string
	// Attempts is how many attempt folders (op_…_attempt_0 … _attempt_<n-1>) the operator has (at least 1).
	Attempts int
}

// ForStTree is a generated ForSt job and where its working folders are.
type ForStTree struct {
	*Tree
	Job string // job folder
	// Attempts are the keys of the op_…_attempt_<n> folders, oldest attempt first.
	Attempts []string
	// Working are the files in them.
	Working []string
}

// ForStOperator is the operator identifier the scenario's working folders carry, as ForSt writes it
// into a folder name (every character outside [A-Za-z0-9-] replaced by "_").
const ForStOperator = "KeyedProcessOperator_20ba6b65f97481d5570070de90e4e791__1_1__"

// ForSt writes a job whose newest checkpoint references one shared SST, and its ForSt working
// folders: in each attempt a db folder holding SSTs, a MANIFEST, CURRENT and OPTIONS (the newest
// attempt also links, by name, an SST of an older attempt's folder, as a restore does: nothing
// records that in the store).
func ForSt(dir string, now time.Time, s ForStSpec) (*ForStTree, error) {
	t, err := newTree("ForSt", dir, "", now)
	if err != nil {
		return nil, err
	}
	ft := &ForStTree{Tree: t, Job: "flink/" + s.JobID}
	if !s.Newest.IsZero() {
		c, err := t.Checkpoint(Spec{Dir: ft.Job + "/chk-12", ID: 12, Completed: s.Newest,
			Shared: []string{ft.Job + "/shared/" + uuidOf(s.JobID+"/sst")}, Private: []string{uuidOf(s.JobID + "/priv")}})
		if err != nil {
			return nil, err
		}
		if err := t.Data(c, s.Newest.Add(-time.Minute)); err != nil {
			return nil, err
		}
	}
	root := ft.Job + "/shared"
	if s.Primary != "" {
		root = path.Join(s.Primary, s.JobID)
	}
	for a := range max(s.Attempts, 1) {
		att := fmt.Sprintf("%s/op_%s_attempt_%d", root, ForStOperator, a)
		ft.Attempts = append(ft.Attempts, att)
		for i, name := range []string{fmt.Sprintf("%06d.sst", 10*a+7), fmt.Sprintf("%06d.sst", 10*a+8), fmt.Sprintf("MANIFEST-%06d", 10*a+5), "CURRENT", fmt.Sprintf("OPTIONS-%06d", 10*a+3)} {
			k := att + "/db/" + name
			if err := t.Write(k, int64(64+i), s.WorkingMTime); err != nil {
				return nil, err
			}
			ft.Working = append(ft.Working, k)
		}
	}
	return ft, nil
}
