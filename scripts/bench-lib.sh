# Helpers the local mount benchmarks (bench-mount.sh, bench-quarantine.sh) share; sourced, not run.
# The sourcing script sets WORK (its scratch directory), MNT (the mount point) and PID ("" or the mount
# daemon's process id) before the EXIT trap can fire; BENCH_DIR set by the user keeps WORK afterwards.

# cleanup stops the mount daemon, lazily unmounts MNT and removes WORK unless the user chose it: a failed
# or interrupted run leaves no mount behind.
cleanup() {
	if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
	mountpoint -q "$MNT" && umount -l "$MNT" 2>/dev/null || true
	if [ -z "${BENCH_DIR:-}" ]; then rm -rf "$WORK"; fi
}

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

# best / median of the seconds given as arguments.
best() { python3 -c 'import sys; print(min(float(x) for x in sys.argv[1:]))' "$@"; }
median() { python3 -c 'import sys, statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }
