#!/usr/bin/env bash
# Side-by-side cost of the guard mount (issue 4): the same cleanup/listing through
#   plain   - the store directory itself
#   unguard - an unguarded go-fuse loopback mount (fs/internal/cmd/plainloop, same mount options)
#   guard   - `ckguard mount` over the same store (index built, every deletion decided and audited)
# Prints seconds (best of $RUNS) and the ratios; target guard/unguard <= 1.05.
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
	[ -z "${BENCH_DIR:-}" ] && rm -rf "$WORK"
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

# Runs are interleaved (plain, unguarded, guard, plain, ...) so drifting machine load hits every contender
# alike; the best run of each counts.
declare -A RM FIND RMT FINDT
for r in $(seq 1 "$RUNS"); do
	for kind in plain unguard guard; do
		store="$WORK/rm-$kind-$r"
		make_files "$store" "$N_RM"
		sync
		start "$kind" "$store"
		t0=$(now); rm -rf "$DIR/job_old"; t1=$(now)
		stop
		left=$(find "$store" -type f | wc -l)
		[ "$left" -eq 0 ] || { echo "$kind: rm -rf left $left files" >&2; exit 1; }
		RMT[$kind]="${RMT[$kind]:-} $(python3 -c "print($t1-$t0)")"
		rm -rf "$store"
	done
done
for kind in plain unguard guard; do RM[$kind]=$(best ${RMT[$kind]}); done

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
for kind in plain unguard guard; do FIND[$kind]=$(best ${FINDT[$kind]}); done

python3 - "${RM[plain]}" "${RM[unguard]}" "${RM[guard]}" "${FIND[plain]}" "${FIND[unguard]}" "${FIND[guard]}" "$N_RM" "$N_FIND" "$RUNS" <<'PY'
import sys
rp, ru, rg, fp, fu, fg = map(float, sys.argv[1:7])
nrm, nfind, runs = sys.argv[7:10]
print(f"bench-mount (best of {runs}; seconds)")
print(f"{'workload':<34}{'plain':>9}{'unguarded':>11}{'guard':>9}{'guard/unguarded':>17}{'guard/plain':>13}")
print(f"{'rm -rf ' + nrm + ' unreferenced files':<34}{rp:>9.3f}{ru:>11.3f}{rg:>9.3f}{rg/ru:>17.3f}{rg/rp:>13.2f}")
print(f"{'find -type f over ' + nfind + ' files':<34}{fp:>9.3f}{fu:>11.3f}{fg:>9.3f}{fg/fu:>17.3f}{fg/fp:>13.2f}")
print("target: guard/unguarded <= 1.05")
PY
