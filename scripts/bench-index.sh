#!/usr/bin/env bash
# Index benchmarks (issue 3): rebuild time and peak RSS of `ckguard index rebuild` on a generated
# local store of 10,000 checkpoints / 10M references (targets ≤ 60 s, ≤ 1 GiB), then Decide latency
# p50/p99 on that index (target p99 ≤ 20 µs). The store is generated once and cached:
#   CKGUARD_BENCH_REFS (default 10000000; 1,000 references per checkpoint, 100 checkpoints per job)
#   CKGUARD_BENCH_DIR  (default ${TMPDIR:-/tmp}/ckguard-bench-$CKGUARD_BENCH_REFS)
set -euo pipefail
cd "$(dirname "$0")/.."
REFS=${CKGUARD_BENCH_REFS:-10000000}
DIR=${CKGUARD_BENCH_DIR:-${TMPDIR:-/tmp}/ckguard-bench-$REFS}
CKS=$((REFS / 1000)); JOBS=$(( CKS / 100 > 0 ? CKS / 100 : 1 )); PER=$((CKS / JOBS))
BIN=$(mktemp -d)
trap 'rm -rf "$BIN"' EXIT
go build -o "$BIN/ckguard" ./cmd/ckguard
go build -o "$BIN/gentree" ./refindex/treegen/gentree

if [ ! -f "$DIR/store.json" ]; then
  rm -rf "$DIR"; mkdir -p "$DIR"
  echo "generating $JOBS jobs x $PER checkpoints x 1000 references into $DIR/store ..."
  start=$(date +%s.%N)
  "$BIN/gentree" -out "$DIR/store" -jobs "$JOBS" -checkpoints "$PER" -refs 1000 -new 50 -seed bench > "$DIR/store.json.tmp"
  mv "$DIR/store.json.tmp" "$DIR/store.json"
  echo "generated in $(echo "$(date +%s.%N) - $start" | bc) s ($(du -sh "$DIR/store" | cut -f1) of _metadata)"
fi

rm -rf "$DIR/index"
echo "== ckguard index rebuild ($REFS references; load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
/usr/bin/time -v "$BIN/ckguard" index rebuild --store "$DIR/store" --index "$DIR/index" 2> "$DIR/time.txt"
wall=$(grep 'Elapsed (wall clock)' "$DIR/time.txt" | awk '{print $NF}')
rss=$(grep 'Maximum resident set size' "$DIR/time.txt" | awk '{print $NF}')
cpu=$(grep -E 'User time|System time' "$DIR/time.txt" | awk '{s+=$NF} END {print s}')
secs=$(echo "$wall" | awk -F: '{ if (NF==3) print $1*3600+$2*60+$3; else print $1*60+$2 }')
printf 'rebuild: %s s wall (%s s CPU), peak RSS %d MiB, index %s on disk\n' "$secs" "$cpu" $((rss / 1024)) "$(du -sh "$DIR/index" | cut -f1)"
printf 'rebuild vs target: time %.2f x 60 s, RSS %.2f x 1 GiB\n' "$(echo "$secs / 60" | bc -l)" "$(echo "$rss / 1048576" | bc -l)"

echo "== Decide latency (go test -bench BenchmarkDecide, index above; load average before: $(cut -d' ' -f1-3 /proc/loadavg))"
# p50/p99-µs are wall clock (they include preemption on a busy machine); p50/p99-cpu-µs are the
# deciding thread's CPU time.
CKGUARD_BENCH_DIR="$DIR" CKGUARD_BENCH_REFS="$REFS" go test -run '^$' -bench 'BenchmarkDecide' -benchtime 200000x -count 1 ./refindex/ | grep -E 'Benchmark|ok'
echo "(target: p99 ≤ 20 µs; machine load at the end: $(cut -d' ' -f1-3 /proc/loadavg))"
