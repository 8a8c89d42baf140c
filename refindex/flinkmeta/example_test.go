package flinkmeta_test

import (
	"fmt"

	"github.com/ckguard/ckguard/refindex/flinkmeta"
)

// Build a Flink 1.20-style incremental RocksDB checkpoint, encode it, parse it back and list
// what restoring it needs.
func Example() {
	m := flinkmeta.NewCheckpoint(4, 42, true)
	op := flinkmeta.NewOperator(flinkmeta.IDFromUID("orders-agg"), "", "", 1, 128)
	start, num := flinkmeta.KeyGroupRange(128, 1, 0)
	op.Subtasks = []flinkmeta.SubtaskState{{
		Index: 0,
		ManagedKeyed: flinkmeta.Incremental(42, start, num,
			flinkmeta.Inline("meta", []byte("rocksdb meta")),
			[]flinkmeta.NamedHandle{{LocalPath: "000007.sst", Handle: flinkmeta.File("s3://ckpt/job/shared/sst-7", 1<<20)}},
			[]flinkmeta.NamedHandle{{LocalPath: "MANIFEST-000004", Handle: flinkmeta.Relative("manifest-uuid", 512)}}),
	}}
	m.Operators = append(m.Operators, op)

	b, err := flinkmeta.Encode(m)
	if err != nil {
		panic(err)
	}
	parsed, err := flinkmeta.ParseBytes(b, "s3://ckpt/job/chk-42/_metadata", flinkmeta.Options{})
	if err != nil {
		panic(err)
	}
	fmt.Println(parsed.FormatVersion, parsed.CheckpointID, parsed.Kind, parsed.InlineBytes())
	for _, r := range parsed.References("s3://ckpt/job/chk-42/_metadata") {
		fmt.Println(r.Kind, r.StateKind, r.Resolved)
	}
	// Output:
	// 4 42 checkpoint 12
	// file keyed-shared s3://ckpt/job/shared/sst-7
	// relative keyed-private s3://ckpt/job/chk-42/manifest-uuid
}
