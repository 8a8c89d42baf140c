package flinkmeta

// Summary is the machine-readable overview of a `_metadata` file that `ckguard inspect --json`
// prints. Other tools read these exact field names; change them only together with them.
type Summary struct {
	FormatVersion   int               `json:"formatVersion"`
	CheckpointID    int64             `json:"checkpointId"`
	Kind            string            `json:"kind"`            // checkpoint | savepoint | unknown
	SavepointFormat string            `json:"savepointFormat"` // canonical | native | ""
	Operators       []OperatorSummary `json:"operators"`
	HandleCounts    map[string]int    `json:"handleCounts"`
	References      []RefSummary      `json:"references"`
	InlineBytes     int64             `json:"inlineBytes"`
}

// OperatorSummary describes one operator. SubtaskStates counts the subtasks that carry state
// (finished-subtask markers and fully finished operators count 0).
type OperatorSummary struct {
	ID             string `json:"id"`
	Name           string `json:"name"`
	UID            string `json:"uid"`
	Parallelism    int32  `json:"parallelism"`
	MaxParallelism int32  `json:"maxParallelism"`
	SubtaskStates  int    `json:"subtaskStates"`
}

// RefSummary is a Reference without its holder.
type RefSummary struct {
	Kind     RefKind `json:"kind"`
	URI      string  `json:"uri"`
	Resolved string  `json:"resolved"`
	Offset   int64   `json:"offset"`
	Length   int64   `json:"length"`
}

// Summarize builds the Summary of m read from metadataPath (see References).
func (m *Metadata) Summarize(metadataPath string) Summary {
	s := Summary{
		FormatVersion: m.FormatVersion, CheckpointID: m.CheckpointID, Kind: m.Kind, SavepointFormat: m.SavepointFormat,
		Operators: []OperatorSummary{}, HandleCounts: m.HandleCounts(), References: []RefSummary{}, InlineBytes: m.InlineBytes(),
	}
	for i := range m.Operators {
		op := &m.Operators[i]
		n := 0
		for j := range op.Subtasks {
			if !op.Subtasks[j].Finished {
				n++
			}
		}
		s.Operators = append(s.Operators, OperatorSummary{ID: op.ID.String(), Name: op.Name, UID: op.UID,
			Parallelism: op.Parallelism, MaxParallelism: op.MaxParallelism, SubtaskStates: n})
	}
	for _, r := range m.References(metadataPath) {
		s.References = append(s.References, RefSummary{Kind: r.Kind, URI: r.URI, Resolved: r.Resolved, Offset: r.Offset, Length: r.Length})
	}
	return s
}

// OperatorStats summarizes the handles of one operator for human-readable output.
type OperatorStats struct {
	HandleCounts map[string]int
	// FileBytes is the sum of the sizes recorded for file, relative and segment handles (as the
	// writer observed them; -1 "unknown" sizes are not added); InlineBytes the inline payloads.
	FileBytes, InlineBytes int64
	FinishedSubtasks       int
}

// Stats returns the OperatorStats of m.Operators[i].
func (m *Metadata) Stats(i int) OperatorStats {
	op := &m.Operators[i]
	st := OperatorStats{HandleCounts: map[string]int{}}
	one := &Metadata{FormatVersion: m.FormatVersion, Operators: m.Operators[i : i+1]}
	st.HandleCounts = one.HandleCounts()
	st.InlineBytes = one.InlineBytes()
	w := walker{stream: func(_ *walkCtx, h *StreamHandle) {
		switch h.Code {
		case StreamFile, StreamRelativeFile, StreamSegmentFile:
			if h.Size > 0 {
				st.FileBytes += h.Size
			}
		}
	}}
	w.walk(one)
	for j := range op.Subtasks {
		if op.Subtasks[j].Finished {
			st.FinishedSubtasks++
		}
	}
	return st
}
