#!/usr/bin/env bash
# Cost of staged deletion: rm -rf of N unreferenced files (folders of 1000, 10 days old) through the local
# guard mount with --quarantine 0s (deletions final: unlinkat) and with --quarantine 24h (every file moved
# into the store's quarantine folder with its entry record). $RUNS pairs, each an off and an on run on
# the same layout made before either is timed, the order alternating per pair; prints each pair's ratio
# on/off with the load, their median, min and max (target <= 1.2), the medians in seconds, and the
# daemon's CPU time per file (user + system, from /proc: what the
# quarantine adds, less sensitive to the load than the wall time) with its ratio on/off per pair.
# BENCH_STRACE=1 adds one untimed pair under `strace -f -c` and prints the daemon's syscalls per file
# with the quarantine off and on (those made at least once per 20 files), to see what a staging costs
# beyond the unlinkat it replaces. Needs root (or /dev/fuse access) and fuse3 (and strace for BENCH_STRACE).
# Env: CKGUARD (binary, default bin/ckguard), N (10000), RUNS (5), BENCH_STRACE, BENCH_DIR (default a temp
# dir under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
CKGUARD=${CKGUARD:-bin/ckguard}
N=${N:-10000}
RUNS=${RUNS:-5}
[ -x "$CKGUARD" ] || go build -o "$CKGUARD" ./cmd/ckguard
WORK=${BENCH_DIR:-$(mktemp -d /tmp/ckguard-qbench.XXXXXX)}
mkdir -p "$WORK"
MNT="$WORK/mnt"
mkdir -p "$MNT"
PID=""
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
trap cleanup EXIT

start() {
	local q=$1 store=$2
	rm -rf "$WORK/index"
	"$CKGUARD" mount --foreground --store "$store" --index "$WORK/index" --grace 0s --quarantine "$q" \
		--audit-log "$WORK/audit.jsonl" --control-socket "$WORK/ctl.sock" "$MNT" >"$WORK/guard.log" 2>&1 &
	PID=$!
	for _ in $(seq 1 600); do
		mountpoint -q "$MNT" && return 0
		kill -0 "$PID" 2>/dev/null || { echo "mount process died:" >&2; cat "$WORK/guard.log" >&2; return 1; }
		sleep 0.1
	done
	echo "mount did not come up" >&2
	return 1
}

stop() {
	kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""
	mountpoint -q "$MNT" && umount "$MNT" || true
}

# cpu_ticks PID: the process's user + system time in clock ticks.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)

declare -A T C
RATIOS=""
CRATIOS=""
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$RUNS"); do
	# Both stores of a pair are made (same layout) and synced before either is timed, so the two runs
	# follow each other at once; the order alternates per pair (off-on, on-off, ...) so a load that drifts
	# within a pair favours neither.
	order="0s 24h"
	[ $((r % 2)) -eq 0 ] && order="24h 0s"
	for q in 0s 24h; do make_files "$WORK/store-$q-$r" "$N"; done
	sync
	declare -A P=() PC=()
	for q in $order; do
		store="$WORK/store-$q-$r"
		start "$q" "$store"
		c0=$(cpu_ticks "$PID")
		t0=$(date +%s.%N)
		rm -rf "$MNT/job_old"
		t1=$(date +%s.%N)
		c1=$(cpu_ticks "$PID")
		stop
		left=$(find "$store" -path "$store/.ckguard-quarantine" -prune -o -type f -print | wc -l)
		staged=$( (ls "$store/.ckguard-quarantine" 2>/dev/null || true) | grep -vcx 'entries.jsonl' || true)
		[ "$left" -eq 0 ] || { echo "quarantine $q: $left files left after rm -rf" >&2; exit 1; }
		if [ "$q" = 24h ] && [ "$staged" -ne "$N" ]; then echo "quarantine 24h: $staged staged, want $N" >&2; exit 1; fi
		P[$q]=$(python3 -c "print($t1 - $t0)")
		T[$q]="${T[$q]:-} ${P[$q]}"
		PC[$q]=$(python3 -c "print(($c1 - $c0) / $TICK * 1e6 / $N)")
		C[$q]="${C[$q]:-} ${PC[$q]}"
		rm -rf "$store"
	done
	ratio=$(python3 -c "print(${P[24h]} / ${P[0s]})")
	cratio=$(python3 -c "print(${PC[24h]} / max(${PC[0s]}, 1e-9))")
	RATIOS="$RATIOS $ratio"
	CRATIOS="$CRATIOS $cratio"
	printf 'pair %d (%s): off %.3f s, on %.3f s, ratio %.2f; CPU per file off %.1f us, on %.1f us, ratio %.2f; load %s\n' \
		"$r" "$order" "${P[0s]}" "${P[24h]}" "$ratio" "${PC[0s]}" "${PC[24h]}" "$cratio" "$(cut -d' ' -f1 /proc/loadavg)"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
off_m=$(median ${T[0s]}); on_m=$(median ${T[24h]})
printf 'rm -rf of %d files through the local mount (%d pairs)\n' "$N" "$RUNS"
printf '  --quarantine 0s   median %.3f s\n' "$off_m"
printf '  --quarantine 24h  median %.3f s\n' "$on_m"
printf '  ratio on/off per pair: median %.2f, min %.2f, max %.2f; target <= 1.2\n' \
	"$(median $RATIOS)" "$(best $RATIOS)" "$(python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:]))' $RATIOS)"
printf '  daemon CPU per file (median): off %.1f us, on %.1f us; ratio on/off per pair: median %.2f, min %.2f, max %.2f\n' \
	"$(median ${C[0s]})" "$(median ${C[24h]})" "$(median $CRATIOS)" "$(best $CRATIOS)" \
	"$(python3 -c 'import sys; print(max(float(x) for x in sys.argv[1:]))' $CRATIOS)"

if [ -n "${BENCH_STRACE:-}" ]; then
	# One more pair, untimed (strace slows every syscall): the daemon's syscalls per deleted file.
	command -v strace >/dev/null || { echo "BENCH_STRACE needs strace" >&2; exit 1; }
	for q in 0s 24h; do
		store="$WORK/store-$q-strace"
		make_files "$store" "$N"
		sync
		start "$q" "$store"
		strace -f -c -o "$WORK/strace-$q" -p "$PID" 2>/dev/null & SPID=$!
		sleep 1 # strace attaches to every thread asynchronously
		rm -rf "$MNT/job_old"
		kill -INT "$SPID"; wait "$SPID" || true
		stop
		rm -rf "$store"
	done
	echo "daemon syscalls per deleted file (strace -f -c, one untimed pair):"
	python3 - "$N" "$WORK/strace-0s" "$WORK/strace-24h" <<'PY'
import sys
n = int(sys.argv[1])
def calls(path):
    out = {}
    for line in open(path):
        f = line.split()
        # % time, seconds, usecs/call, calls, [errors,] syscall
        if len(f) >= 5 and f[0][0].isdigit() and f[-1] != "total":
            out[f[-1]] = int(f[3])
    return out
off, on = calls(sys.argv[2]), calls(sys.argv[3])
names = sorted(k for k in set(off) | set(on) if max(off.get(k, 0), on.get(k, 0)) * 20 >= n)
for k in names:
    print("  %-16s off %5.2f  on %5.2f" % (k, off.get(k, 0) / n, on.get(k, 0) / n))
PY
fi
