#!/usr/bin/env bash
# POSIX conformance of the mounts: runs pjdfstest (the Rust rewrite, installed by scripts/setup.sh into
# .tools/bin) in a fresh folder of each filesystem named on the command line, prints the counts, and checks:
#   - every run ran at least MIN_PASSED tests (a suite that found nothing to run never passes);
#   - the guard fails only the tests listed in scripts/posix-expected-failures.txt (deliberate refusals,
#     docs/SEMANTICS.md, "What passes through"), so it passes every other test the stock loopback passes; with the loopback run
#     too, every test the loopback passes must pass on the guard (not fail, not be skipped, not be missing
#     because the suite or the mount died half-way) unless listed, and it says which listed ones the
#     loopback passes;
#   - the guard passes every long-path case (`*::enametoolong_component`, `*::enametoolong_path`: a name of
#     NAME_MAX + 1 bytes, a path of PATH_MAX bytes made of NAME_MAX-byte folders, for each syscall), at
#     least LONG_PATH_CASES of them (28 in pjdfstest 0.2.2): a suite that skipped or lost them never passes.
# Kinds: plain (the store folder itself, on whatever filesystem holds BENCH_DIR), loopback (go-fuse's stock
# loopback, fs/internal/cmd/plainloop), guard (`ckguard mount` over a local store), s3 (`ckguard mount`
# over versitygw on 127.0.0.1; counts only, no check). Default: loopback guard.
# Needs root, fuse3, /etc/fuse.conf user_allow_other (setup does it), the users nobody/nogroup and
# daemon/daemon (Debian's) for the tests that switch users. Env: PJDFSTEST, CKGUARD (default bin/ckguard),
# MIN_PASSED (300), LONG_PATH_CASES (28), POSIX_DIR (work dir, default a temp dir), KEEP=1 keeps it.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
PJDFSTEST=${PJDFSTEST:-$REPO/.tools/bin/pjdfstest}
CKGUARD_GIVEN=${CKGUARD:-}
CKGUARD=${CKGUARD:-$REPO/bin/ckguard}
MIN_PASSED=${MIN_PASSED:-300}
LONG_PATH_CASES=${LONG_PATH_CASES:-28}
EXPECTED=$REPO/scripts/posix-expected-failures.txt
KINDS=("$@")
((${#KINDS[@]})) || KINDS=(loopback guard)
[ -x "$PJDFSTEST" ] || { echo "posix-suite: $PJDFSTEST missing: run scripts/setup.sh" >&2; exit 1; }
# The default binary is rebuilt (cached by go build): a stale bin/ckguard would test old code.
[ -n "$CKGUARD_GIVEN" ] || go build -o "$CKGUARD" ./cmd/ckguard
[ -x "$CKGUARD" ] || { echo "posix-suite: $CKGUARD missing" >&2; exit 1; }
WORK=${POSIX_DIR:-$(mktemp -d /tmp/ckguard-posix.XXXXXX)}
mkdir -p "$WORK"
chmod 755 "$WORK" # the tests that switch users must reach the mountpoints below it
PIDS=()
MNTS=()
cleanup() {
	for m in "${MNTS[@]}"; do mountpoint -q "$m" && { fusermount3 -u "$m" 2>/dev/null || umount -l "$m"; }; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	[ "${KEEP:-}" = 1 ] || [ -n "${POSIX_DIR:-}" ] || rm -rf "$WORK"
}
trap cleanup EXIT

# The suite's configuration: the opt-in features ext4 and FUSE both have; sleeps longer than the kernel's
# coarse timestamp granularity (a few ms); the two dummy users Debian ships.
cat >"$WORK/pjdfstest.toml" <<'EOF'
[features]
posix_fallocate = {}
utime_now = {}
utimensat = {}
rename_ctime = {}

[settings]
naptime = 0.02
allow_remount = false

[dummy_auth]
entries = [
  ["nobody", "nogroup"],
  ["daemon", "daemon"],
]
EOF
SECONDARY=$(mktemp -d /dev/shm/ckguard-posix.XXXXXX 2>/dev/null || mktemp -d "$WORK/secondary.XXXXXX")
chmod 755 "$SECONDARY"
trap 'cleanup; rm -rf "$SECONDARY"' EXIT

wait_mounted() { # MOUNTPOINT PID
	for _ in $(seq 1 300); do
		mountpoint -q "$1" && return 0
		kill -0 "$2" 2>/dev/null || { echo "posix-suite: the mount of $1 died" >&2; return 1; }
		sleep 0.1
	done
	echo "posix-suite: $1 did not come up" >&2
	return 1
}

start_s3() { # prints the endpoint; versitygw serving a fresh data dir, bucket "posix"
	local vgw port data
	vgw=${CKGUARD_VERSITYGW:-$REPO/.tools/bin/versitygw}
	port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
	data="$WORK/s3data"
	mkdir -p "$data"
	"$vgw" --access posixsuite --secret posixsuitesecret --port "127.0.0.1:$port" --health /health --quiet \
		--keep-alive posix "$data" >"$WORK/versitygw.log" 2>&1 &
	PIDS+=($!)
	for _ in $(seq 1 200); do curl -sf "http://127.0.0.1:$port/health" >/dev/null && break; sleep 0.1; done
	AWS_ACCESS_KEY_ID=posixsuite AWS_SECRET_ACCESS_KEY=posixsuitesecret AWS_REGION=us-east-1 \
		/usr/bin/aws --endpoint-url "http://127.0.0.1:$port" s3api create-bucket --bucket posix >/dev/null
	echo "http://127.0.0.1:$port"
}

# run KIND: mounts, runs the suite in a fresh folder, writes $WORK/KIND.results ("name status" lines).
run() {
	local kind=$1 dir store mnt pid
	store="$WORK/$kind-store"
	mnt="$WORK/$kind-mnt"
	mkdir -p "$store" "$mnt"
	chmod 755 "$store" "$mnt"
	case $kind in
	plain) dir=$store ;;
	loopback)
		go build -o "$WORK/plainloop" ./fs/internal/cmd/plainloop
		"$WORK/plainloop" -allow-other "$store" "$mnt" >"$WORK/$kind.log" 2>&1 &
		pid=$!; PIDS+=("$pid"); MNTS+=("$mnt"); wait_mounted "$mnt" "$pid"; dir=$mnt ;;
	guard)
		# --grace 0s: the suite deletes what it just created; with the default grace every such deletion
		# would be refused (files in flight). Every operation is still decided and audited. --quarantine 0s:
		# a staged file keeps a name in the quarantine, so unlinked files would keep a link count of 1.
		"$CKGUARD" mount --foreground --allow-other --store "$store" --index "$WORK/$kind-index" --grace 0s --quarantine 0s \
			--audit-log "$WORK/$kind-audit.jsonl" --control-socket "$WORK/$kind.sock" "$mnt" >"$WORK/$kind.log" 2>&1 &
		pid=$!; PIDS+=("$pid"); MNTS+=("$mnt"); wait_mounted "$mnt" "$pid"; dir=$mnt ;;
	s3)
		local ep
		ep=$(start_s3)
		AWS_ACCESS_KEY_ID=posixsuite AWS_SECRET_ACCESS_KEY=posixsuitesecret AWS_REGION=us-east-1 \
			"$CKGUARD" mount --foreground --allow-other --store s3://posix/store --s3-endpoint "$ep" --s3-path-style \
			--index "$WORK/$kind-index" --grace 0s --audit-log "$WORK/$kind-audit.jsonl" \
			--control-socket "$WORK/$kind.sock" "$mnt" >"$WORK/$kind.log" 2>&1 &
		pid=$!; PIDS+=("$pid"); MNTS+=("$mnt"); wait_mounted "$mnt" "$pid"; dir=$mnt ;;
	*) echo "posix-suite: unknown kind $kind (plain, loopback, guard, s3)" >&2; return 2 ;;
	esac
	mkdir -p "$dir/pjdfstest"
	chmod 755 "$dir/pjdfstest"
	local t0=$SECONDS
	# pjdfstest exits non-zero when a test fails; the checks below judge the results.
	(cd "$dir/pjdfstest" && "$PJDFSTEST" -c "$WORK/pjdfstest.toml" -p "$dir/pjdfstest" -s "$SECONDARY" >"$WORK/$kind.out" 2>&1) || true
	sed -nE 's/^([a-z0-9_:]+)[[:space:]]+(ok|FAILED|skipped)[[:space:]]*$/\1 \2/p' "$WORK/$kind.out" | sort >"$WORK/$kind.results"
	printf '%-9s %4d passed %3d failed %3d skipped (%d s)\n' "$kind" \
		"$(grep -c ' ok$' "$WORK/$kind.results" || true)" "$(grep -c ' FAILED$' "$WORK/$kind.results" || true)" \
		"$(grep -c ' skipped$' "$WORK/$kind.results" || true)" "$((SECONDS - t0))"
}

for k in "${KINDS[@]}"; do run "$k"; done

status=0
for k in "${KINDS[@]}"; do
	passed=$(grep -c ' ok$' "$WORK/$k.results" || true)
	if ((passed < MIN_PASSED)); then
		echo "posix-suite: $k passed only $passed tests (fewer than $MIN_PASSED): the suite did not run; see $WORK/$k.out" >&2
		status=1
	fi
	grep ' FAILED$' "$WORK/$k.results" | cut -d' ' -f1 >"$WORK/$k.failed" || true
done
if [ -f "$WORK/guard.results" ]; then
	grep -vE '^[[:space:]]*(#|$)' "$EXPECTED" | awk '{print $1}' | sort >"$WORK/expected" || true
	unexpected=$(comm -23 "$WORK/guard.failed" "$WORK/expected")
	if [ -n "$unexpected" ]; then
		echo "posix-suite: the guard fails tests that are not deliberate refusals (scripts/posix-expected-failures.txt):" >&2
		echo "$unexpected" | sed 's/^/  /' >&2
		for n in $unexpected; do grep -A3 "^$n " "$WORK/guard.out" | sed 's/^/    /' >&2; done
		status=1
	fi
	long_ok=$(grep -cE '::enametoolong_(component|path) ok$' "$WORK/guard.results" || true)
	long_bad=$(grep -E '::enametoolong_(component|path) ' "$WORK/guard.results" | grep -v ' ok$' || true)
	if ((long_ok < LONG_PATH_CASES)) || [ -n "$long_bad" ]; then
		echo "posix-suite: the guard passed $long_ok long-path cases (ENAMETOOLONG, NAME_MAX/PATH_MAX), not the $LONG_PATH_CASES the suite has:" >&2
		[ -z "$long_bad" ] || echo "$long_bad" | sed 's/^/  /' >&2
		status=1
	fi
	fixed=$(comm -13 "$WORK/guard.failed" "$WORK/expected")
	[ -z "$fixed" ] || { echo "posix-suite: listed as expected failures but passing now (remove them from the list):"; echo "$fixed" | sed 's/^/  /'; }
	if [ -f "$WORK/loopback.results" ]; then
		# The comparison itself: what the loopback passes, the guard passes too, unless it is a listed
		# refusal. This also catches cases the guard run skipped or never reached (a crash, a dead mount),
		# which the FAILED lines above cannot show.
		grep ' ok$' "$WORK/guard.results" | cut -d' ' -f1 >"$WORK/guard.ok" || true
		lost=$(comm -23 <(grep ' ok$' "$WORK/loopback.results" | cut -d' ' -f1) "$WORK/guard.ok" | comm -23 - "$WORK/expected")
		if [ -n "$lost" ]; then
			echo "posix-suite: cases the stock loopback passes that the guard does not (failed, skipped or not run), not listed in scripts/posix-expected-failures.txt:" >&2
			for n in $lost; do
				st=$(grep "^$n " "$WORK/guard.results" | cut -d' ' -f2 || true)
				echo "  $n: ${st:-not run}"
			done >&2
			status=1
		fi
		# Anything else the guard fails is unexpected above; these are its deliberate refusals.
		worse=$(comm -12 <(grep ' ok$' "$WORK/loopback.results" | cut -d' ' -f1) "$WORK/guard.failed" | comm -12 - "$WORK/expected")
		[ -z "$worse" ] || { echo "posix-suite: deliberate refusals (tests the stock loopback passes):"; echo "$worse" | sed 's/^/  /'; }
	fi
fi
[ "$status" = 0 ] && echo "posix-suite: ok"
exit "$status"
