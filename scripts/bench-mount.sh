#!/usr/bin/env bash
# Side-by-side cost of the guard mount (issue 4): the same cleanup/listing through
#   plain   - the store directory itself
#   unguard - an unguarded go-fuse loopback mount (fs/internal/cmd/plainloop, same mount options)
#   guard   - `ckguard mount` over the same store (index built, every deletion decided and audited)
# Prints seconds (best and median of $RUNS) and the ratios; target guard/unguard <= 1.05. For the rm runs it
# also prints the mount daemon's CPU time per deleted file (user+sys of the daemon process, from
# /proc/PID/stat) and, when perf is installed, its context switches per file: on a shared machine these are
# steadier than wall time. The load average is printed before and after, to judge how noisy the figures are.
# Needs root (or /dev/fuse access) and fuse3. Env: CKGUARD (binary, default bin/ckguard), N_RM (10000),
# N_FIND (100000), RUNS (3), BENCH_DIR (default a temp dir under /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
CKGUARD=${CKGUARD:-bin/ckguard}
N_RM=${N_RM:-10000}
N_FIND=${N_FIND:-100000}
RUNS=${RUNS:-3}
[ -x "$CKGUARD" ] || go build -o "$CKGUARD" ./cmd/ckguard
WORK=${BENCH_DIR:-$(mktemp -d /tmp/ckguard-bench.XXXXXX)}
mkdir -p "$WORK"
PLAINLOOP="$WORK/plainloop"
go build -o "$PLAINLOOP" ./fs/internal/cmd/plainloop

MNT="$WORK/mnt"
mkdir -p "$MNT"
PID=""
cleanup() {
	if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
	mountpoint -q "$MNT" && umount -l "$MNT" 2>/dev/null || true
	if [ -z "${BENCH_DIR:-}" ]; then rm -rf "$WORK"; fi
}
trap cleanup EXIT

now() { date +%s.%N; }

# make_files DIR N: N empty files spread over folders of 1000, mtimes 10 days old (past any grace).
make_files() {
	python3 - "$1" "$2" <<'PY'
import os, sys, time
root, n = sys.argv[1], int(sys.argv[2])
old = time.time() - 10 * 86400
for i in range(n):
    d = os.path.join(root, "job_old", "shared", "d%03d" % (i // 1000))
    if i % 1000 == 0:
        os.makedirs(d, exist_ok=True)
    p = os.path.join(d, "sst-%06d" % i)
    with open(p, "wb"):
        pass
    os.utime(p, (old, old))
PY
}

wait_mounted() {
	for _ in $(seq 1 600); do
		mountpoint -q "$MNT" && return 0
		if [ -n "$PID" ] && ! kill -0 "$PID" 2>/dev/null; then echo "mount process died" >&2; return 1; fi
		sleep 0.1
	done
	echo "mount did not come up" >&2
	return 1
}

# start KIND STORE: sets DIR, the directory to operate on (not via $(...): PID must stay in this shell).
start() {
	local kind=$1 store=$2
	case $kind in
	plain) DIR=$store; return ;;
	unguard) "$PLAINLOOP" "$store" "$MNT" >"$WORK/plainloop.log" 2>&1 & PID=$! ;;
	guard)
		rm -rf "$WORK/index"
		"$CKGUARD" mount --foreground --store "$store" --index "$WORK/index" --grace 0s \
			--audit-log "$WORK/audit.jsonl" --control-socket "$WORK/ctl.sock" "$MNT" >"$WORK/guard.log" 2>&1 & PID=$! ;;
	esac
	wait_mounted
	DIR=$MNT
}

stop() {
	[ -z "$PID" ] && return 0
	kill -TERM "$PID"; wait "$PID" 2>/dev/null || true; PID=""
	mountpoint -q "$MNT" && umount "$MNT" || true
}

best() { python3 -c 'import sys; print(min(float(x) for x in sys.argv[1:]))' "$@"; }
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# Runs are interleaved (plain, unguarded, guard, plain, ...) so drifting machine load hits every contender
# alike; the best run of each counts.
# cpu_ticks PID: user+sys clock ticks the process has used (all its threads, live or exited).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
PERF=$(command -v perf || true)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

declare -A RM FIND RMT FINDT RMCPU RMCS RMMED FINDMED
for r in $(seq 1 "$RUNS"); do
	for kind in plain unguard guard; do
		store="$WORK/rm-$kind-$r"
		make_files "$store" "$N_RM"
		sync
		start "$kind" "$store"
		if [ -n "$PID" ]; then
			c0=$(cpu_ticks "$PID")
			if [ -n "$PERF" ]; then
				"$PERF" stat -e context-switches -x, -o "$WORK/perf-$kind" -p "$PID" & PERFPID=$!
				sleep 0.2 # perf attaches asynchronously
			fi
		fi
		t0=$(now); rm -rf "$DIR/job_old"; t1=$(now)
		if [ -n "$PID" ]; then
			c1=$(cpu_ticks "$PID")
			RMCPU[$kind]="${RMCPU[$kind]:-} $(python3 -c "print(($c1-$c0)/$TICK/$N_RM*1e6)")"
			if [ -n "$PERF" ]; then
				kill -INT "$PERFPID"; wait "$PERFPID" || true
				cs=$(awk -F, '/context-switches/{print $1}' "$WORK/perf-$kind")
				RMCS[$kind]="${RMCS[$kind]:-} $(python3 -c "print($cs/$N_RM)")"
			fi
		fi
		stop
		left=$(find "$store" -type f | wc -l)
		[ "$left" -eq 0 ] || { echo "$kind: rm -rf left $left files" >&2; exit 1; }
		RMT[$kind]="${RMT[$kind]:-} $(python3 -c "print($t1-$t0)")"
		rm -rf "$store"
	done
done
for kind in plain unguard guard; do RM[$kind]=$(best ${RMT[$kind]}); RMMED[$kind]=$(median ${RMT[$kind]}); done

FSTORE="$WORK/find-store"
make_files "$FSTORE" "$N_FIND"
find "$FSTORE" -type f >/dev/null # warm the backing filesystem's caches for every contender alike
for r in $(seq 1 "$RUNS"); do
	for kind in plain unguard guard; do
		start "$kind" "$FSTORE"
		t0=$(now); n=$(find "$DIR" -type f | wc -l); t1=$(now)
		stop
		[ "$n" -eq "$N_FIND" ] || { echo "$kind: find saw $n files, want $N_FIND" >&2; exit 1; }
		FINDT[$kind]="${FINDT[$kind]:-} $(python3 -c "print($t1-$t0)")"
	done
done
for kind in plain unguard guard; do FIND[$kind]=$(best ${FINDT[$kind]}); FINDMED[$kind]=$(median ${FINDT[$kind]}); done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "${RM[plain]}" "${RM[unguard]}" "${RM[guard]}" "${FIND[plain]}" "${FIND[unguard]}" "${FIND[guard]}" "$N_RM" "$N_FIND" "$RUNS" \
	"${RMMED[plain]}" "${RMMED[unguard]}" "${RMMED[guard]}" "${FINDMED[plain]}" "${FINDMED[unguard]}" "${FINDMED[guard]}" \
	"${RMCPU[unguard]}" "${RMCPU[guard]}" "${RMCS[unguard]:-}" "${RMCS[guard]:-}" "$LOAD0" "$LOAD1" <<'PY'
import statistics, sys
rp, ru, rg, fp, fu, fg = map(float, sys.argv[1:7])
nrm, nfind, runs = sys.argv[7:10]
mrp, mru, mrg, mfp, mfu, mfg = map(float, sys.argv[10:16])
cpu_u, cpu_g, cs_u, cs_g = (sorted(map(float, a.split())) for a in sys.argv[16:20])
load0, load1 = sys.argv[20:22]
print(f"bench-mount (best of {runs}, median in brackets; seconds; load average {load0} before, {load1} after)")
print(f"{'workload':<34}{'plain':>9}{'unguarded':>11}{'guard':>9}{'guard/unguarded':>17}{'guard/plain':>13}")
print(f"{'rm -rf ' + nrm + ' unreferenced files':<34}{rp:>9.3f}{ru:>11.3f}{rg:>9.3f}{rg/ru:>17.3f}{rg/rp:>13.2f}")
print(f"{'  (median)':<34}{mrp:>9.3f}{mru:>11.3f}{mrg:>9.3f}{mrg/mru:>17.3f}{mrg/mrp:>13.2f}")
print(f"{'find -type f over ' + nfind + ' files':<34}{fp:>9.3f}{fu:>11.3f}{fg:>9.3f}{fg/fu:>17.3f}{fg/fp:>13.2f}")
print(f"{'  (median)':<34}{mfp:>9.3f}{mfu:>11.3f}{mfg:>9.3f}{mfg/mfu:>17.3f}{mfg/mfp:>13.2f}")
cu, cg = statistics.median(cpu_u), statistics.median(cpu_g)
print(f"rm -rf daemon CPU per file (median): unguarded {cu:.1f} us, guard {cg:.1f} us, guard adds {cg-cu:.1f} us")
if cs_u and cs_g:
    su, sg = statistics.median(cs_u), statistics.median(cs_g)
    print(f"rm -rf daemon context switches per file (median): unguarded {su:.2f}, guard {sg:.2f}")
print("target: guard/unguarded <= 1.05")
PY
