#!/usr/bin/env bash
# Side-by-side cost of the guard mount (issue 4): the same cleanup/listing through
#   plain   - the store directory itself
#   unguard - an unguarded go-fuse loopback mount (fs/internal/cmd/plainloop, same mount options)
#   unguard1 - the same loopback with GOMAXPROCS=1, which is how `ckguard mount` serves a single client
#             (--serve-procs, fs/procs): guard/unguard1 isolates the cost of guarding from that setting
#   guard   - `ckguard mount` over the same store (index built, every deletion decided and audited)
# Workloads: rm -rf of N_RM unreferenced files by one client, the same files removed by 4 concurrent rm -rf
# (one per group of folders), and find -type f over N_FIND files.
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
# shellcheck source=scripts/bench-lib.sh
. scripts/bench-lib.sh
trap cleanup EXIT

now() { date +%s.%N; }

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
	unguard1) GOMAXPROCS=1 "$PLAINLOOP" "$store" "$MNT" >"$WORK/plainloop.log" 2>&1 & PID=$! ;;
	guard)
		rm -rf "$WORK/index"
		"$CKGUARD" mount --foreground --store "$store" --index "$WORK/index" --grace 0s --quarantine 0s \
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

# Runs are interleaved (plain, unguarded, guard, plain, ...) so drifting machine load hits every contender
# alike; the best run of each counts.
# cpu_ticks PID: user+sys clock ticks the process has used (all its threads, live or exited).
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
TICK=$(getconf CLK_TCK)
PERF=$(command -v perf || true)
LOAD0=$(cut -d' ' -f1-3 /proc/loadavg)

KINDS="plain unguard unguard1 guard"
declare -A RMT RM4T FINDT RMCPU RMCS
# rm_clients DIR CLIENTS: removes DIR/job_old with CLIENTS concurrent rm -rf, folder d<i> going to client i % CLIENTS.
rm_clients() {
	local dir=$1 clients=$2 pids=() k
	if [ "$clients" -eq 1 ]; then rm -rf "$dir/job_old"; return; fi
	for k in $(seq 0 $((clients - 1))); do
		(for d in "$dir"/job_old/shared/d*; do
			i=$((10#${d##*/d}))
			if [ $((i % clients)) -eq "$k" ]; then rm -rf "$d"; fi
		done) & pids+=($!)
	done
	wait "${pids[@]}"
	rm -rf "$dir/job_old"
}
for r in $(seq 1 "$RUNS"); do
	for clients in 1 4; do
		for kind in $KINDS; do
			store="$WORK/rm-$kind-$r"
			make_files "$store" "$N_RM"
			sync
			start "$kind" "$store"
			if [ -n "$PID" ] && [ "$clients" -eq 1 ]; then
				c0=$(cpu_ticks "$PID")
				if [ -n "$PERF" ]; then
					"$PERF" stat -e context-switches -x, -o "$WORK/perf-$kind" -p "$PID" & PERFPID=$!
					sleep 0.2 # perf attaches asynchronously
				fi
			fi
			t0=$(now); rm_clients "$DIR" "$clients"; t1=$(now)
			if [ -n "$PID" ] && [ "$clients" -eq 1 ]; then
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
			[ "$left" -eq 0 ] || { echo "$kind: rm -rf ($clients clients) left $left files" >&2; exit 1; }
			if [ "$clients" -eq 1 ]; then
				RMT[$kind]="${RMT[$kind]:-} $(python3 -c "print($t1-$t0)")"
			else
				RM4T[$kind]="${RM4T[$kind]:-} $(python3 -c "print($t1-$t0)")"
			fi
			rm -rf "$store"
		done
	done
done

FSTORE="$WORK/find-store"
make_files "$FSTORE" "$N_FIND"
find "$FSTORE" -type f >/dev/null # warm the backing filesystem's caches for every contender alike
for r in $(seq 1 "$RUNS"); do
	for kind in $KINDS; do
		start "$kind" "$FSTORE"
		t0=$(now); n=$(find "$DIR" -type f | wc -l); t1=$(now)
		stop
		[ "$n" -eq "$N_FIND" ] || { echo "$kind: find saw $n files, want $N_FIND" >&2; exit 1; }
		FINDT[$kind]="${FINDT[$kind]:-} $(python3 -c "print($t1-$t0)")"
	done
done
LOAD1=$(cut -d' ' -f1-3 /proc/loadavg)

# One "workload:kind=t1 t2 ..." argument per contender and workload.
args=()
for kind in $KINDS; do args+=("rm:$kind=${RMT[$kind]}" "rm4:$kind=${RM4T[$kind]}" "find:$kind=${FINDT[$kind]}"); done
for kind in unguard unguard1 guard; do args+=("cpu:$kind=${RMCPU[$kind]}" "cs:$kind=${RMCS[$kind]:-}"); done
python3 - "$N_RM" "$N_FIND" "$RUNS" "$LOAD0" "$LOAD1" "${args[@]}" <<'PY'
import statistics, sys
nrm, nfind, runs, load0, load1 = sys.argv[1:6]
d = {}
for a in sys.argv[6:]:
    k, v = a.split("=", 1)
    d[k] = [float(x) for x in v.split()]
print(f"bench-mount (best of {runs}, median in brackets; seconds; load average {load0} before, {load1} after)")
print(f"{'workload':<30}{'plain':>8}{'unguarded':>11}{'unguarded 1P':>14}{'guard':>8}{'guard/unguarded':>17}{'guard/unguarded 1P':>20}")
for w, name in (("rm", f"rm -rf {nrm} files, 1 client"), ("rm4", f"rm -rf {nrm} files, 4 clients"), ("find", f"find -type f, {nfind} files")):
    for agg, label in ((min, name), (statistics.median, "  (median)")):
        p, u, u1, g = (agg(d[f"{w}:{k}"]) for k in ("plain", "unguard", "unguard1", "guard"))
        print(f"{label:<30}{p:>8.3f}{u:>11.3f}{u1:>14.3f}{g:>8.3f}{g/u:>17.3f}{g/u1:>20.3f}")
cu, cu1, cg = (statistics.median(d[f"cpu:{k}"]) for k in ("unguard", "unguard1", "guard"))
print(f"rm -rf (1 client) daemon CPU per file (median): unguarded {cu:.1f} us, unguarded 1P {cu1:.1f} us, guard {cg:.1f} us")
if d["cs:unguard"] and d["cs:unguard1"] and d["cs:guard"]:
    su, su1, sg = (statistics.median(d[f"cs:{k}"]) for k in ("unguard", "unguard1", "guard"))
    print(f"rm -rf (1 client) daemon context switches per file (median): unguarded {su:.2f}, unguarded 1P {su1:.2f}, guard {sg:.2f}")
print("target: guard/unguarded <= 1.05 (unguarded = go-fuse's loopback as it comes). The 1P column holds the")
print("loopback to the GOMAXPROCS the guard serves one client with: it shows what the guarding itself costs.")
PY
