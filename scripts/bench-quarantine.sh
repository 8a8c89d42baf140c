#!/usr/bin/env bash
# Cost of staged deletion: rm -rf of N unreferenced files (folders of 1000, 10 days old) through the local
# guard mount with --quarantine 0s (deletions final: unlinkat) and with --quarantine 24h (every file moved
# into the store's quarantine folder with its entry record). Runs are interleaved (off, on, off, on, ...)
# so drifting machine load hits both alike; prints seconds (best and median of $RUNS) and the ratio
# on/off (target <= 1.2), and the daemon's CPU time per file (user + system, from /proc: what the
# quarantine adds, less sensitive to the load than the wall time). Needs root (or /dev/fuse access) and fuse3.
# Env: CKGUARD (binary, default bin/ckguard), N (10000), RUNS (5), BENCH_DIR (default a temp dir under /tmp).
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
echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
for r in $(seq 1 "$RUNS"); do
	for q in 0s 24h; do
		store="$WORK/store-$q-$r"
		make_files "$store" "$N"
		sync
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
		T[$q]="${T[$q]:-} $(python3 -c "print($t1 - $t0)")"
		C[$q]="${C[$q]:-} $(python3 -c "print(($c1 - $c0) / $TICK * 1e6 / $N)")"
		rm -rf "$store"
	done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
off_b=$(best ${T[0s]}); on_b=$(best ${T[24h]})
off_m=$(median ${T[0s]}); on_m=$(median ${T[24h]})
printf 'rm -rf of %d files through the local mount (best / median of %d runs)\n' "$N" "$RUNS"
printf '  --quarantine 0s   %.3f s / %.3f s\n' "$off_b" "$off_m"
printf '  --quarantine 24h  %.3f s / %.3f s\n' "$on_b" "$on_m"
printf '  ratio on/off      %.2f (best) / %.2f (median); target <= 1.2\n' \
	"$(python3 -c "print($on_b / $off_b)")" "$(python3 -c "print($on_m / $off_m)")"
printf '  daemon CPU per file (median): off %.1f us, on %.1f us\n' "$(median ${C[0s]})" "$(median ${C[24h]})"
