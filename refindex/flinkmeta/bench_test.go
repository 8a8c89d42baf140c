package flinkmeta

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"
)

var (
	bigOnce sync.Once
	bigFile []byte
)

// bigMetadata builds (once) a ~200 MB V6 checkpoint: 1,000 operators × 32 subtasks, each an
// incremental RocksDB handle with 50 shared SSTs at absolute s3:// paths plus private files.
func bigMetadata(b *testing.B) []byte {
	bigOnce.Do(func() {
		m := NewCheckpoint(6, 4711, true)
		base := "s3://flink-checkpoints-prod/checkpoints/2f0b9b4f6e3c4d0a8b1c2d3e4f5a6b7c/shared"
		for o := 0; o < 1000; o++ {
			op := NewOperator(ID(fmt.Sprint(o)), fmt.Sprintf("KeyedProcess %d", o), fmt.Sprintf("uid-%d", o), 32, 4096)
			op.Subtasks = make([]SubtaskState, 32)
			for s := int32(0); s < 32; s++ {
				start, num := KeyGroupRange(4096, 32, s)
				seed := fmt.Sprintf("%d/%d", o, s)
				op.Subtasks[s] = SubtaskState{Index: s, ManagedKeyed: Incremental(4711, start, num, Relative(UUID(seed+"meta"), 2048),
					SSTs(base, seed, 50, 64<<20), RelativeFiles(seed, "MANIFEST-000004", "OPTIONS-000009", "CURRENT"))}
			}
			m.Operators = append(m.Operators, op)
		}
		var err error
		if bigFile, err = Encode(m); err != nil {
			panic(err)
		}
	})
	return bigFile
}

func largestFixture(b *testing.B) []byte {
	var best []byte
	for _, f := range loadFixtures(b) {
		if len(f.data) > len(best) {
			best = f.data
		}
	}
	return best
}

// cpuTime is the CPU time (user+system, all threads incl. GC) this process has used. Reported
// next to wall-clock MB/s because the benchmark machine is shared: wall time includes waiting
// for a core, CPU time does not.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func benchParse(b *testing.B, data []byte, readerAt bool) {
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	defer func() {
		if d := cpuTime() - cpu0; d > 0 {
			b.ReportMetric(float64(len(data))*float64(b.N)/1e6/d.Seconds(), "MB/cpu-s")
		}
	}()
	for i := 0; i < b.N; i++ {
		var err error
		if readerAt {
			_, err = Parse(onlyReaderAt{bytes.NewReader(data)}, int64(len(data)), "bench", Options{})
		} else {
			_, err = ParseBytes(data, "bench", Options{})
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParseLargestFixture(b *testing.B) { benchParse(b, largestFixture(b), false) }
func BenchmarkParse200MB(b *testing.B)          { benchParse(b, bigMetadata(b), false) }
func BenchmarkParse200MBReaderAt(b *testing.B)  { benchParse(b, bigMetadata(b), true) }

func BenchmarkReferences200MB(b *testing.B) {
	m, err := ParseBytes(bigMetadata(b), "bench", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if refs := m.References("s3://x/chk-1/_metadata"); len(refs) != 1000*32*54 {
			b.Fatalf("%d refs", len(refs))
		}
	}
}

// BenchmarkParseMemory200MB reports the live heap held by a parsed Metadata relative to the file
// size (file read through a ReaderAt, so the file bytes themselves are not on the heap).
func BenchmarkParseMemory200MB(b *testing.B) {
	data := bigMetadata(b)
	path := filepath.Join(b.TempDir(), "_metadata")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		b.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for i := 0; i < b.N; i++ {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m, err := Parse(f, int64(len(data)), path, Options{})
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		runtime.KeepAlive(m)
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(len(data)), "heap/file")
		b.ReportMetric(float64(after.HeapInuse-before.HeapInuse)/float64(1000*32*54), "heapB/ref")
	}
}
