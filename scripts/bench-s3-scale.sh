#!/usr/bin/env bash
# S3 at scale: the index and the mount on a generated bucket of 1,000,000 objects (issue 15), one run,
# figures and ratios printed, each with the machine's load (run by `make bench`, or alone).
#
#   1. Index syncs at 0 ms and 20 ms per request side by side (BenchmarkS3SyncLatency in s3store, on its
#      own generated bucket of SCALE_N objects: jobs of 5,000 SSTs, 10 checkpoints of 2,000 references):
#      no-change sync (descent and --s3-full-walk), a sync with 50 new checkpoints x 2,000 references,
#      full walks, rebuild, request counts and the extrapolation to 10 M and 100 M objects.
#   2. Syncs at many checkpoints (BenchmarkS3SyncCheckpoints: CKPT_N checkpoints, _metadata only, plus
#      EXCLUSIVE files in each checkpoint folder): the per-sync cost that grows with checkpoints, measured
#      directly rather than extrapolated; a HEAD per checkpoint against the flat listing of checkpoint
#      folders, and a sync that retires with a whole second listing against one of new keys only.
#   3. The mount, at SMALL_N and then SCALE_N objects (the same generator, in versitygw's posix folder),
#      behind the test proxy at LAT per request: time to the first index build, RSS and the index lag
#      (ckguard_index_lag_seconds) sampled for SOAK_SMALL / SOAK seconds with --sync-interval SYNC, then
#      `find -type f` over everything against the raw ListObjectsV2 walk (s3raw) of the same bucket
#      (s3client's walk, so with its lean XML decoder like the mount; also shown with the SDK's decoding),
#      in alternating rounds (raw walk, find; the median of the per-round ratios is the figure), with each
#      one's requests, and the RSS after the finds.
#
# Targets: sync at 20 ms <= 10 s; lag <= --sync-interval + sync time; burst sync of the same order as a
# no-change sync, without a rebuild; mount RSS <= 1 GiB at 1 M objects; find / raw walk <= 1.3.
#
# The loss check, in the mount phase: once it has completed a check, one referenced object of a shared/
# folder is removed beside the mount (from versitygw's folder, as `aws s3 rm` would): the time until
# ckguard_missing_referenced_objects shows it (during the soak, else up to the advertised bound after it),
# against the bound the mount advertises (ckguard_loss_check_bound_seconds); the soak's and the find's
# requests include the loss check's listings. The soak's samples also hold the advertised bound and the
# last pass's duration, and each find samples them every 2 s (find-N-ROUND.tsv): their ranges after the
# first pass and during the find are reported (the find's listings slow the check to its busy pace).
#
# Sizes (environment): BENCH_S3_SCALE_N (1000000), BENCH_S3_SMALL_N (100000), BENCH_S3_CKPT_N (20000),
# BENCH_S3_EXCLUSIVE (0),
# BENCH_S3_LAT (20ms), BENCH_S3_SOAK (600 s), BENCH_S3_SOAK_SMALL (120 s), BENCH_S3_SYNC (30s),
# BENCH_S3_FIND_ROUNDS (5: alternating raw walks and finds, the median of the per-round ratios reported);
# BENCH_S3_MOUNT_FLAGS adds flags to the mount (e.g. "--loss-check-rate 0.01" as a control run),
# BENCH_S3_MOUNT_ENV environment to it (e.g. "GODEBUG=gctrace=1": the collector's trace in its log).
# At 10 M objects (issue 15's target: BENCH_S3_SCALE_N=10000000 gives 2,000 jobs, 20,000 checkpoints,
# 40 M references; about 45 GB and 10 M inodes): BENCH_S3_RAW_WALK=0 skips the two raw walks,
# BENCH_S3_FIND_JOBS=N runs the `find` over the first N job folders only (5,000 objects each; 0: all),
# BENCH_S3_LINK=1 writes each job's data files as hard links to its first one (gentree -link: one
# inode per job, about 6 GB and a third of the time at 10 M; keys are still distinct objects through
# S3, sharing one mtime per job), BENCH_S3_SAMPLE (1 s) is the soak's sampling period, BENCH_S3_OUT a folder that keeps the report, the
# soak's samples (time, RSS, index lag) and the mount's log (the scratch folder is removed at the end).
# The generation stops (and the run fails) when fewer than BENCH_S3_MIN_INODES (1,500,000) inodes or
# BENCH_S3_MIN_FREE_MB (2,048) MiB are left on the scratch file system, and refuses to start when the
# store would not fit above those. After each mount phase, one no-change `ckguard index sync` on the
# unmounted index: its time, requests, peak RSS, and the index's size on disk.
# BENCH_S3_TREE=DIR keeps the generated store for later runs instead of the scratch folder: versitygw
# serves DIR/data (the bucket is DIR/data/bench); a phase whose DIR/gen-N.json exists (written only once
# its generation completed) reuses the tree as it is, otherwise it is generated there first (it must
# then be empty). One size per DIR: set BENCH_S3_SMALL_N=0 (or another DIR per size); the same
# BENCH_S3_LINK as when it was generated. The object the loss check removes is put back at the end of
# the phase. The generation can run ahead, unmeasured, e.g. at nice 19 while other work runs:
#   BENCH_S3_TREE=/work/t BENCH_S3_SMALL_N=0 BENCH_S3_SCALE_N=10000000 BENCH_S3_LINK=1 BENCH_S3_PARTS=generate \
#     nice -n 19 scripts/bench-s3-scale.sh   # only generates (part "generate"), then exits
# BENCH_S3_DEADLINE=EPOCH-SECONDS ends a soak by then at the latest (when the first build ran long and
# the machine is wanted back; the report says so).
# BENCH_S3_CKGUARD=FILE mounts with that ckguard binary instead of one built from this tree (a run of
# another commit, built beforehand).
# BENCH_S3_FIND=0 ends a phase with its soak: no wait for the loss check beyond it, no find through the
# mount, no unmounted no-change sync (at 10 M objects they take long after the memory figures are in).
# BENCH_S3_HEAP=1 also saves the mount's heap profile (`ckguard debug heap`) when ready and after the
# soak into BENCH_S3_OUT (heap-N-ready.pb.gz, heap-N-soak.pb.gz) and reports their in-use totals and top
# entries; the collector's CPU share is the "N%" of the last gc line in the mount's log with
# BENCH_S3_MOUNT_ENV="GODEBUG=gctrace=1" (reported when present).
# BENCH_S3_MEMLIMIT=SIZE (e.g. 1G) moves the mount, once it is ready, into a memory cgroup (v1, below
# this shell's own; charges of its mapped pages moved with it) limited to SIZE, as systemd's MemoryMax
# would: the report gives the cgroup's usage, peak, failcnt, OOM kills, cache and major faults after
# the soak, and whether the mount still decides (a referenced object's rm through it is refused).
# The RSS by mapping kind (.sst tables, .vlog, .mem, other files, anonymous; scripts/smaps-split.py)
# is reported when ready and after the soak (smaps-N-ready.txt, smaps-N-soak.txt list the files).
# BENCH_S3_PARTS (default "index checkpoints mount"; also "losscheck": one complete loss check pass,
# listings against a HEAD per object, BenchmarkS3LossCheck) selects the parts; a size of 0 skips that mount
# phase. Disk: about 5 GB per 1 M objects
# (1-byte files), freed at the end; scratch under BENCH_S3_TMP (default /tmp).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
SCALE_N=${BENCH_S3_SCALE_N:-1000000}
SMALL_N=${BENCH_S3_SMALL_N:-100000}
CKPT_N=${BENCH_S3_CKPT_N:-20000}
EXCLUSIVE=${BENCH_S3_EXCLUSIVE:-0}
LAT=${BENCH_S3_LAT:-20ms}
SOAK=${BENCH_S3_SOAK:-600}
SOAK_SMALL=${BENCH_S3_SOAK_SMALL:-120}
SYNC=${BENCH_S3_SYNC:-30s}
FIND_ROUNDS=${BENCH_S3_FIND_ROUNDS:-5}
read -r -a MOUNT_FLAGS <<<"${BENCH_S3_MOUNT_FLAGS:-}"
read -r -a MOUNT_ENV <<<"${BENCH_S3_MOUNT_ENV:-}"
RAW_WALK=${BENCH_S3_RAW_WALK:-1}
FIND_JOBS=${BENCH_S3_FIND_JOBS:-0}
SAMPLE=${BENCH_S3_SAMPLE:-1}
OUT=${BENCH_S3_OUT:-}
MIN_INODES=${BENCH_S3_MIN_INODES:-1500000}
LINK=${BENCH_S3_LINK:-0}
MIN_FREE_MB=${BENCH_S3_MIN_FREE_MB:-2048}
PARTS=${BENCH_S3_PARTS:-index checkpoints mount}
TREE=${BENCH_S3_TREE:-}
HEAP=${BENCH_S3_HEAP:-0}
FIND=${BENCH_S3_FIND:-1}
MEMLIMIT=${BENCH_S3_MEMLIMIT:-}
VGW=${CKGUARD_VERSITYGW:-$ROOT/.tools/bin/versitygw}
for tool in "$VGW" fusermount3 python3 curl go; do
	command -v "$tool" >/dev/null || { echo "bench-s3-scale: $tool missing (run make setup)" >&2; exit 1; }
done

WORK=$(mktemp -d "${BENCH_S3_TMP:-/tmp}/ckguard-bench-s3-scale.XXXXXX")
DATA=$WORK/data # versitygw's posix folder (the bucket is DATA/bench)
if [ -n "$TREE" ]; then
	mkdir -p "$TREE/data"
	TREE=$(cd "$TREE" && pwd)
	DATA=$TREE/data
	if [ "$SMALL_N" -gt 0 ] && [ "$SCALE_N" -gt 0 ]; then
		echo "bench-s3-scale: BENCH_S3_TREE holds one size: set BENCH_S3_SMALL_N=0 (or run each size with its own BENCH_S3_TREE)" >&2
		exit 2
	fi
fi
RESTORE=() # "saved-copy original" pairs: objects the loss check removed from a kept tree
PIDS=()
MOUNTS=()
cleanup() {
	if [ -n "$OUT" ]; then mkdir -p "$OUT" && cp "$WORK"/report "$WORK"/soak-*.tsv "$WORK"/find-*.tsv "$WORK"/mount-*.log "$WORK"/gen-*.json "$WORK"/sync-*.txt "$WORK"/heap-*.pb.gz "$WORK"/heap-*.txt "$WORK"/smaps-*.txt "$OUT"/ 2>/dev/null || true; fi
	for r in ${RESTORE[@]+"${RESTORE[@]}"}; do mv -f "${r% *}" "${r#* }" 2>/dev/null || true; done
	for m in "${MOUNTS[@]}"; do fusermount3 -uz "$m" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	[ -z "${CG:-}" ] || rmdir "$CG" 2>/dev/null || true
	rm -rf "$WORK"
}
trap cleanup EXIT
load() { cut -d' ' -f1-3 /proc/loadavg; }
now() { date +%s.%N; }
since() { python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
ratio() { python3 -c "import sys; a,b=float(sys.argv[1]),float(sys.argv[2]); print(f'{a/b:.2f}' if b else 'n/a')" "$1" "$2"; }
REPORT=$WORK/report
row() { printf '%-58s %14s  [load %s]\n' "$1" "$2" "$3" | tee -a "$REPORT"; }

echo "bench-s3-scale: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB, load $(load), in $WORK"

if [[ " $PARTS " == *" index "* ]]; then
	echo "== 1. index syncs on $SCALE_N objects at 0 ms and 20 ms (BenchmarkS3SyncLatency)"
	CKGUARD_BENCH_S3_OBJECTS=$SCALE_N TMPDIR=$WORK go test ./s3backend/s3store/ -run '^$' -bench 'S3SyncLatency$' -benchtime 1x -timeout 3h | tee "$WORK/index.txt"
fi
if [[ " $PARTS " == *" checkpoints "* ]]; then
	echo "== 2. index syncs at $CKPT_N checkpoints at 0 ms and 20 ms (BenchmarkS3SyncCheckpoints)"
	CKGUARD_BENCH_S3_CHECKPOINTS=$CKPT_N CKGUARD_BENCH_S3_EXCLUSIVE=$EXCLUSIVE TMPDIR=$WORK go test ./s3backend/s3store/ -run '^$' -bench 'S3SyncCheckpoints$' -benchtime 1x -timeout 3h | tee "$WORK/ckpt.txt"
fi
if [[ " $PARTS " == *" losscheck "* ]]; then
	echo "== 2b. one complete loss check on $SCALE_N objects at 20 ms: folder listings against a HEAD each (BenchmarkS3LossCheck)"
	CKGUARD_BENCH_S3_OBJECTS=$SCALE_N TMPDIR=$WORK go test ./s3backend/s3store/ -run '^$' -bench 'S3LossCheck$' -benchtime 1x -timeout 3h | tee "$WORK/loss.txt"
fi
[[ " $PARTS " == *" mount "* ]] || [[ " $PARTS " == *" generate "* ]] || exit 0
go build -o "$WORK/gentree" ./refindex/treegen/gentree
rss_mib() { awk '/VmRSS/{printf "%d", $2/1024}' "/proc/$1/status"; }
rss_parts() { awk '/RssAnon|RssFile/{printf "%s%d", sep, $2/1024; sep=" / "}' "/proc/$1/status"; } # anonymous / file-backed (badger's mapped tables)
majflt() { awk '{print $12}' "/proc/$1/stat"; } # major faults so far (pages read back from disk)
smaps_split() { # objects when pid: the RSS by mapping kind (.sst, .vlog, .mem, other files, anonymous), in the report and smaps-N-when.txt
	/usr/bin/python3 "$ROOT/scripts/smaps-split.py" "$3" -v >"$WORK/smaps-$1-$2.txt" 2>&1 || true
	head -5 "$WORK/smaps-$1-$2.txt" | sed "s/^/  $1 smaps $2: /" | tee -a "$REPORT"
}
hwm_mib() { awk '/VmHWM/{printf "%d", $2/1024}' "/proc/$1/status"; } # the peak RSS so far
free_inodes() { df --output=iavail "$DATA" | tail -1 | tr -d ' '; }
free_mb() { df -m --output=avail "$DATA" | tail -1 | tr -d ' '; }
# generate dir jobs: gentree, stopped when the scratch file system runs low on inodes or space (a full
# disk would fail other work on the machine, and half a store measures nothing).
generate() { # dir jobs objects: reuses a kept tree (BENCH_S3_TREE) whose generation completed
	if [ -n "$TREE" ] && [ -s "$TREE/gen-$3.json" ]; then
		echo "bench-s3-scale: reusing the tree of $3 objects in $1 ($TREE/gen-$3.json)" >&2
		cp "$TREE/gen-$3.json" "$WORK/gen-$3.json"
		return 0
	fi
	if [ -n "$TREE" ] && [ -n "$(ls -A "$1" 2>/dev/null)" ]; then
		echo "bench-s3-scale: $1 holds a tree without $TREE/gen-$3.json (an interrupted generation or another size): empty it or choose another BENCH_S3_TREE" >&2
		return 1
	fi
	generate_new "$@" >"$WORK/gen-$3.json"
	if [ -n "$TREE" ]; then cp "$WORK/gen-$3.json" "$TREE/gen-$3.json.tmp" && mv "$TREE/gen-$3.json.tmp" "$TREE/gen-$3.json"; fi
}
generate_new() {
	local need_inodes=$(( $2 * 5010 + $2 * 12 )) need_mb=$(( $2 * 5010 * 45 / 10000 )) link=()
	if [ "$LINK" != 0 ]; then need_inodes=$(( $2 * 25 )); need_mb=$(( $2 * 4 )); link=(-link); fi
	if [ $(( $(free_inodes) - need_inodes )) -lt "$MIN_INODES" ] || [ $(( $(free_mb) - need_mb )) -lt "$MIN_FREE_MB" ]; then
		echo "bench-s3-scale: $2 jobs need about $need_inodes inodes and $need_mb MiB; $(free_inodes) inodes and $(free_mb) MiB free, below BENCH_S3_MIN_INODES=$MIN_INODES / BENCH_S3_MIN_FREE_MB=$MIN_FREE_MB once written" >&2
		return 1
	fi
	"$WORK/gentree" -out "$1" -jobs "$2" -checkpoints 10 -refs 2000 -new 333 -data ${link[@]+"${link[@]}"} -seed bench &
	local g=$!
	while kill -0 "$g" 2>/dev/null; do
		if [ "$(free_inodes)" -lt "$MIN_INODES" ] || [ "$(free_mb)" -lt "$MIN_FREE_MB" ]; then
			kill "$g"; wait "$g" 2>/dev/null || true
			echo "bench-s3-scale: generation stopped: $(free_inodes) inodes and $(free_mb) MiB left (BENCH_S3_MIN_INODES=$MIN_INODES, BENCH_S3_MIN_FREE_MB=$MIN_FREE_MB)" >&2
			return 1
		fi
		sleep 5
	done
	wait "$g"
}
if [[ " $PARTS " != *" mount "* ]]; then # "generate" alone: the kept tree only (BENCH_S3_TREE)
	[ -n "$TREE" ] || { echo "bench-s3-scale: part generate needs BENCH_S3_TREE" >&2; exit 2; }
	for n in "$SMALL_N" "$SCALE_N"; do
		[ "$n" -gt 0 ] || continue
		mkdir -p "$DATA/bench"
		t0=$(now)
		generate "$DATA/bench" $(( n / 5000 )) "$n"
		echo "bench-s3-scale: $n objects in $DATA/bench after $(since "$t0") s"
	done
	exit 0
fi
echo "== 3. the mount behind $LAT per request"
if [ -n "${BENCH_S3_CKGUARD:-}" ]; then cp "$BENCH_S3_CKGUARD" "$WORK/ckguard"; else go build -o "$WORK/ckguard" ./cmd/ckguard; fi
go build -o "$WORK/s3raw" ./s3backend/internal/cmd/s3raw
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
PORT=$(free_port)
EP=http://127.0.0.1:$PORT
mkdir -p "$DATA/bench"
# --keep-alive: S3 services keep connections open; versitygw closes each one by default.
"$VGW" --access testkey --secret testsecret --port "127.0.0.1:$PORT" --health /health --quiet --keep-alive posix "$DATA" &
PIDS+=($!)
for _ in $(seq 1 200); do curl -fsS "$EP/health" >/dev/null 2>&1 && break; sleep 0.05; done
export AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret AWS_REGION=us-east-1 AWS_DEFAULT_REGION=us-east-1 \
	AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true
coproc PROXY { exec "$WORK/s3raw" proxy --endpoint "$EP" --latency "$LAT"; }
PIDS+=("$PROXY_PID")
read -r PEP <&"${PROXY[0]}"
proxy_ops() { kill -USR1 "$PROXY_PID"; read -r line <&"${PROXY[0]}"; echo "$line"; }

heap_profile() { # objects when: the mount's heap profile (BENCH_S3_HEAP=1), its in-use total and top entries
	[ "$HEAP" != 0 ] || return 0
	local f=$WORK/heap-$1-$2
	if ! "$WORK/ckguard" debug heap --index "$WORK/index-$1" >"$f.pb.gz" 2>"$f.err"; then
		row "$1: heap profile $2: FAILED" "$(tail -1 "$f.err")" "$(load)"
		return 0
	fi
	go tool pprof -top -sample_index=inuse_space "$WORK/ckguard" "$f.pb.gz" 2>/dev/null | head -30 >"$f.txt" || true
	row "$1: heap profile $2: in use after a collection (pprof total)" "$(awk '/^Showing nodes/{print $(NF-1); exit}' "$f.txt")" "$(load)"
	sed -n '/flat%/,$p' "$f.txt" | head -13 | sed "s/^/  $1 heap $2: /" | tee -a "$REPORT"
}
gc_share() { # log: the collector's CPU share so far, from the last gctrace line ("gc N @Ts P%: ...")
	awk '$1=="gc" && $4 ~ /%:$/ {p=$4} END{sub(/:$/, "", p); print p}' "$1"
}
metric() { # name: the first sample's value, or empty
	{ curl -fsS "http://$MADDR/metrics" 2>/dev/null || true; } | awk -v n="$1" '$1==n{print $2; exit}'
}
metric_sum() { # name: the sum over its labelled series
	{ curl -fsS "http://$MADDR/metrics" 2>/dev/null || true; } | awk -v n="$1" 'index($1, n"{")==1{s+=$2} END{print s+0}'
}
nonneg() { python3 -c "import sys; sys.exit(0 if sys.argv[1] and float(sys.argv[1]) >= 0 else 1)" "${1:-}"; }

# The loss check's advertised bound and pass durations sampled every 2 s during a find (its listings
# slow the check down to the busy pace): seconds, bound, last pass.
find_samples() { # name
	printf 'seconds\tloss_bound_s\tloss_pass_s\n' >"$WORK/find-$1.tsv"
	while :; do
		printf '%s\t%s\t%s\n' "$(date +%s)" "$(metric ckguard_loss_check_bound_seconds)" "$(metric ckguard_loss_check_duration_seconds)" >>"$WORK/find-$1.tsv"
		sleep 2
	done
}
bounds() { # tsv bound-column pass-column [skip-first]: "min-max, min-max" over the samples with a pass (bound > 0), with skip-first set after the first pass's
	awk -F'\t' -v b="$2" -v p="$3" -v skip="${4:-}" 'NR>1 && $b+0>0 && skip!="" && first=="" {first=$p} NR>1 && $b+0>0 && !(skip!="" && $p==first) {if(n==0||$b<bl)bl=$b; if($b>bh)bh=$b; if(n==0||$p<pl)pl=$p; if($p>ph)ph=$p; n++}
		END{if(n) printf "%.1f-%.1f, %.1f-%.1f\n", bl, bh, pl, ph; else print "none"}' "$1"
}

CG=""
memlimit() { # objects pid: move the ready mount into a memory cgroup limited to MEMLIMIT (cgroup v1)
	local own
	own=$(awk -F: '$2=="memory"{print $3}' /proc/self/cgroup)
	CG=/sys/fs/cgroup/memory${own%/}/ckguard-bench-$$-$1
	mkdir "$CG" || { echo "bench-s3-scale: BENCH_S3_MEMLIMIT needs cgroup v1's memory controller (mkdir $CG failed)" >&2; exit 1; }
	echo 3 >"$CG/memory.move_charge_at_immigrate" # the anonymous and mapped file pages it has come along
	echo "$MEMLIMIT" >"$CG/memory.limit_in_bytes"
	if ! echo "$2" >"$CG/cgroup.procs"; then
		row "$1: moved into a memory cgroup of $MEMLIMIT: FAILED (its charges do not fit)" "" "$(load)"
		exit 1
	fi
	row "$1: moved into a memory cgroup of $MEMLIMIT; usage then (MiB)" "$(( $(cat "$CG/memory.usage_in_bytes") >> 20 ))" "$(load)"
}
memlimit_report() { # objects pid: the cgroup after the soak, and a decision through the mount
	local n=$1 ck=$2 st=$CG/memory.stat
	stat_mib() { awk -v k="$1" '$1==k{printf "%d", $2/1048576}' "$st"; }
	row "$n: cgroup $MEMLIMIT after the soak: usage, peak (MiB)" "$(( $(cat "$CG/memory.usage_in_bytes") >> 20 )), $(( $(cat "$CG/memory.max_usage_in_bytes") >> 20 ))" "$(load)"
	row "$n:   cgroup rss / cache / mapped_file (MiB)" "$(stat_mib rss) / $(stat_mib cache) / $(stat_mib mapped_file)" "$(load)"
	row "$n:   cgroup failcnt, oom_kill, pgmajfault" "$(cat "$CG/memory.failcnt"), $(awk '$1=="oom_kill"{print $2}' "$CG/memory.oom_control"), $(awk '$1=="pgmajfault"{print $2}' "$st")" "$(load)"
	if ! kill -0 "$ck" 2>/dev/null; then
		row "$n:   the mount is GONE (killed under the limit?): $(dmesg 2>/dev/null | grep -i -m1 'killed process' || true)" "" "$(load)"
		exit 1
	fi
	# A decision under the limit: a referenced object (not the loss check's victim) must be refused.
	local ref out
	ref=$(python3 -c "import json,sys; print([k for k in json.load(open(sys.argv[1]))['SampleReferenced'] if '/shared/' in k][1])" "$WORK/gen-$n.json")
	out=$(rm "$WORK/mnt-$n/$ref" 2>&1 || true)
	case "$out" in *"not permitted"*) row "$n:   rm of a referenced object through the mount under the limit" "EPERM" "$(load)" ;; *) echo "bench-s3-scale: rm $ref through the mount under the limit: '${out:-allowed}', want EPERM" >&2; exit 1 ;; esac
}

phase() { # objects soak-seconds
	local n=$1 soak=$2 jobs=$(( $1 / 5000 ))
	local t0 mnt=$WORK/mnt-$1 idx=$WORK/index-$1
	echo "-- $n objects ($jobs jobs x 10 checkpoints x 2,000 references)"
	t0=$(now)
	generate "$DATA/bench" "$jobs" "$n"
	row "$n: generated in versitygw's folder (s)" "$(since "$t0")" "$(load)"
	row "$n:   scratch file system: inodes used by the store, MiB used" "$(du -s --inodes "$DATA/bench" | cut -f1), $(du -sm "$DATA/bench" | cut -f1)" "$(load)"
	local l raw="" rawsdk=""
	if [ "$RAW_WALK" != 0 ]; then
		l=$(load)
		read -r cnt raw < <("$WORK/s3raw" walk --endpoint "$PEP" --bucket bench)
		row "$n: raw ListObjectsV2 walk at $LAT, $cnt objects (s)" "$raw" "$l"
		# The same walk with the SDK's XML decoding instead of ckguard's lean decoder (both are s3client's).
		l=$(load)
		read -r _ rawsdk < <(CKGUARD_S3_SDK_DECODER=1 "$WORK/s3raw" walk --endpoint "$PEP" --bucket bench)
		row "$n: the raw walk with the SDK's XML decoding (s)" "$rawsdk" "$l"
	fi
	proxy_ops >/dev/null
	MADDR=127.0.0.1:$(free_port)
	mkdir -p "$mnt"
	t0=$(now)
	env ${MOUNT_ENV[@]+"${MOUNT_ENV[@]}"} "$WORK/ckguard" mount --foreground --store s3://bench --index "$idx" --map "file:$DATA/bench=" \
		--sync-interval "$SYNC" --metrics-addr "$MADDR" ${MOUNT_FLAGS[@]+"${MOUNT_FLAGS[@]}"} \
		--s3-endpoint "$PEP" --s3-path-style --s3-region us-east-1 "$mnt" >"$WORK/mount-$n.log" 2>&1 &
	local ck=$!
	PIDS+=("$ck"); MOUNTS+=("$mnt")
	local lag="" anon maxanon=0
	for _ in $(seq 1 36000); do
		kill -0 "$ck" 2>/dev/null || { echo "bench-s3-scale: the mount exited: $(tail -5 "$WORK/mount-$n.log")" >&2; exit 1; }
		anon=$(awk '/RssAnon/{printf "%d", $2/1024}' "/proc/$ck/status" 2>/dev/null || echo 0)
		[ "${anon:-0}" -gt "$maxanon" ] && maxanon=$anon
		lag=$(metric ckguard_index_lag_seconds)
		if [ -n "$lag" ] && python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0 else 1)" "$lag" && grep -q " $mnt fuse" /proc/mounts; then break; fi
		sleep 0.5
	done
	row "$n: mount ready, first index build at $LAT (s)" "$(since "$t0")" "$(load)"
	row "$n:   requests of the first build" "$(proxy_ops)" "$(load)"
	row "$n:   RSS when ready, peak RSS of the first build (VmHWM) (MiB)" "$(rss_mib "$ck"), $(hwm_mib "$ck")" "$(load)"
	row "$n:   index on disk after the first build (MiB)" "$(du -sm "$idx" | cut -f1)" "$(load)"
	row "$n:   RSS when ready: anonymous / file-backed (MiB)" "$(rss_parts "$ck")" "$(load)"
	row "$n:   highest anonymous RSS sampled during the first build (MiB)" "$maxanon" "$(load)"
	row "$n:   major faults of the mount so far" "$(majflt "$ck")" "$(load)"
	smaps_split "$n" ready "$ck"
	if [ -n "$MEMLIMIT" ]; then memlimit "$n" "$ck"; fi
	heap_profile "$n" ready
	local maxlag=0 maxrss=0 r s0 c0 t1
	s0=$(metric ckguard_sync_duration_seconds_sum); c0=$(metric ckguard_sync_duration_seconds_count)
	t1=$(now)
	local victim tl="" bound=""
	local samples=$WORK/soak-$n.tsv
	printf 'seconds\trss_mib\tlag_s\tloss_bound_s\tloss_pass_s\tanon_mib\tfile_mib\tmajflt\n' >"$samples"
	local next=0
	victim=$(python3 -c "import json,sys; print(next(k for k in json.load(open(sys.argv[1]))['SampleReferenced'] if '/shared/' in k))" "$WORK/gen-$n.json")
	if [ -n "${BENCH_S3_DEADLINE:-}" ]; then
		local left=$(( BENCH_S3_DEADLINE - $(date +%s) ))
		if [ "$left" -lt "$soak" ]; then
			soak=$(( left > 0 ? left : 0 ))
			row "$n: soak shortened to end by BENCH_S3_DEADLINE (s)" "$soak" "$(load)"
		fi
	fi
	while python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$(since "$t1")" "$soak"; do
		lag=$(metric ckguard_index_lag_seconds); r=$(rss_mib "$ck")
		maxlag=$(python3 -c "import sys; print(max(float(sys.argv[1]), float(sys.argv[2] or 0)))" "$maxlag" "$lag")
		[ "$r" -gt "$maxrss" ] && maxrss=$r
		local el; el=$(since "$t1")
		if python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$el" "$next"; then
			printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$el" "$r" "$lag" "$(metric ckguard_loss_check_bound_seconds)" "$(metric ckguard_loss_check_duration_seconds)" "$(rss_parts "$ck" | tr -d ' ' | tr / '\t')" "$(majflt "$ck")" >>"$samples"
			next=$(python3 -c "import sys; print(float(sys.argv[1]) + float(sys.argv[2]))" "$next" "$SAMPLE")
		fi
		if [ -z "$tl" ] && nonneg "$(metric ckguard_loss_check_age_seconds)"; then
			bound=$(metric ckguard_loss_check_bound_seconds)
			row "$n: loss check: first complete check $(since "$t1") s into the soak; advertised bound (s)" "$bound" "$(load)"
			if [ -n "$TREE" ]; then # a kept tree gets it back at the end (cleanup)
				mv "$DATA/bench/$victim" "$WORK/victim-$n"
				RESTORE+=("$WORK/victim-$n $DATA/bench/$victim")
			else
				rm -f "$DATA/bench/$victim"
			fi
			tl=$(now)
		fi
		if [ -n "$tl" ] && [ "$tl" != done ] && [ "$(metric_sum ckguard_missing_referenced_objects)" != 0 ]; then
			row "$n: loss check: $victim removed, shown after (s)" "$(since "$tl")" "$(load)"
			row "$n:   advertised bound now (s), round passes, last pass (s)" "$(metric ckguard_loss_check_bound_seconds), $(metric ckguard_loss_check_round_passes), $(metric ckguard_loss_check_duration_seconds)" "$(load)"
			tl=done
		fi
		sleep 1
	done
	local s1 c1 ops
	s1=$(metric ckguard_sync_duration_seconds_sum); c1=$(metric ckguard_sync_duration_seconds_count)
	ops=$(proxy_ops)
	row "$n: loss check bound during the soak after its first pass: min-max (s), passes min-max (s)" "$(bounds "$samples" 4 5 skip)" "$(load)"
	row "$n: syncs during ${soak} s, mean sync (s)" "$(python3 -c "import sys; s0,s1,c0,c1=map(float,sys.argv[1:]); print(f'{int(c1-c0)} x {(s1-s0)/max(c1-c0,1):.2f}')" "${s0:-0}" "${s1:-0}" "${c0:-0}" "${c1:-0}")" "$(load)"
	row "$n:   requests during the soak" "$ops" "$(load)"
	row "$n: max index lag during the soak (s), --sync-interval $SYNC" "$maxlag" "$(load)"
	row "$n: mount RSS after ${soak} s (max sampled) (MiB)" "$(rss_mib "$ck") ($maxrss)" "$(load)"
	row "$n:   soak samples every ${SAMPLE} s: count, max RSS, final RSS (MiB)" "$(awk -F'\t' 'NR>1{n++; if($2>m)m=$2; f=$2} END{print n", "m", "f}' "$samples")" "$(load)"
	row "$n:   index on disk after the soak (MiB)" "$(du -sm "$idx" | cut -f1)" "$(load)"
	row "$n:   RSS after the soak: anonymous / file-backed (MiB)" "$(rss_parts "$ck")" "$(load)"
	row "$n:   major faults of the mount so far" "$(majflt "$ck")" "$(load)"
	smaps_split "$n" soak "$ck"
	if [ -n "$MEMLIMIT" ]; then memlimit_report "$n" "$ck"; fi
	heap_profile "$n" soak
	[ -z "$(gc_share "$WORK/mount-$n.log")" ] || row "$n:   the collector's CPU share since the start (gctrace)" "$(gc_share "$WORK/mount-$n.log")" "$(load)"
	if [ "$FIND" = 0 ]; then
		[ "$tl" = done ] || row "$n: loss check: removed object not shown during the soak (not waited for: BENCH_S3_FIND=0)" "${tl:+removed}" "$(load)"
		fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" || true
		kill "$ck" 2>/dev/null || true
		wait "$ck" 2>/dev/null || true
		return 0
	fi
	if [ -n "$tl" ] && [ "$tl" != done ]; then
		# Not shown during the soak: wait for it up to the advertised bound and a minute.
		while python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) + 60 else 1)" "$(since "$tl")" "${bound:-0}"; do
			if [ "$(metric_sum ckguard_missing_referenced_objects)" != 0 ]; then
				row "$n: loss check: $victim removed, shown after the soak, after (s)" "$(since "$tl")" "$(load)"
				row "$n:   advertised bound now (s), round passes, last pass (s)" "$(metric ckguard_loss_check_bound_seconds), $(metric ckguard_loss_check_round_passes), $(metric ckguard_loss_check_duration_seconds)" "$(load)"
				tl=done
				break
			fi
			sleep 1
		done
	fi
	[ "$tl" = done ] || row "$n: loss check: removed object NOT shown within the advertised bound" "${tl:+removed}" "$(load)"
	if [ "$FIND_JOBS" -gt 0 ] || [ -z "$raw" ]; then
	proxy_ops >/dev/null
	l=$(load); t0=$(now)
	local found tf what="everything"
	if [ "$FIND_JOBS" -gt 0 ]; then
		what="the first $FIND_JOBS job folders"
		# The job folders are read in full before head takes some (no SIGPIPE under pipefail).
		local dirs; dirs=$(find "$mnt/flink" -mindepth 1 -maxdepth 1 -type d | sort)
		found=$(head -n "$FIND_JOBS" <<<"$dirs" | xargs -d '\n' -I{} find {} -type f | wc -l)
	else
		found=$(find "$mnt" -type f | wc -l)
	fi
	tf=$(since "$t0")
	row "$n: find -type f through the mount at $LAT over $what, $found files (s)" "$tf" "$l"
	row "$n:   requests of the find" "$(proxy_ops)" "$(load)"
	if [ -n "$raw" ] && [ "$FIND_JOBS" -eq 0 ]; then
		row "$n: find / raw walk (target <= 1.3)" "$(ratio "$tf" "$raw")" "$(load)"
		row "$n: find / raw walk with the SDK's XML decoding" "$(ratio "$tf" "$rawsdk")" "$(load)"
	fi
	else
	# find -type f through the mount against the raw walk, in FIND_ROUNDS alternating rounds (raw walk,
	# then find, each at the load of its moment): the figure is the median of the per-round ratios, so one
	# burst of load on the shared machine moves one round, not the result.
	local ratios=() tfs=() raws=() found tf rw l2 lr
	for round in $(seq 1 "$FIND_ROUNDS"); do
		proxy_ops >/dev/null
		lr=$(load)
		read -r _ rw < <("$WORK/s3raw" walk --endpoint "$PEP" --bucket bench)
		row "$n: round $round: raw ListObjectsV2 walk (s)" "$rw" "$lr"
		row "$n: round $round:   requests of the raw walk" "$(proxy_ops)" "$(load)"
		l=$(load); t0=$(now)
		find_samples "$n-$round" &
		local fsp=$!
		found=$(find "$mnt" -type f | wc -l)
		tf=$(since "$t0"); l2=$(load)
		kill "$fsp" 2>/dev/null || true; wait "$fsp" 2>/dev/null || true
		row "$n: round $round:   loss check bound during the find: min-max (s), passes min-max (s)" "$(bounds "$WORK/find-$n-$round.tsv" 2 3)" "$(load)"
		row "$n: round $round: find -type f through the mount at $LAT, $found files (s)" "$tf" "$l -> $l2"
		row "$n: round $round:   requests of the find" "$(proxy_ops)" "$(load)"
		row "$n: round $round:   find / raw walk" "$(ratio "$tf" "$rw")" "$(load)"
		ratios+=("$(ratio "$tf" "$rw")"); tfs+=("$tf"); raws+=("$rw")
	done
	median() { python3 -c "import sys,statistics; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "$@"; }
	row "$n: find (median of $FIND_ROUNDS rounds) (s)" "$(median "${tfs[@]}")" "$(load)"
	row "$n: raw walk (median of $FIND_ROUNDS rounds) (s)" "$(median "${raws[@]}")" "$(load)"
	row "$n: find / raw walk, median of per-round ratios (target <= 1.3)" "$(median "${ratios[@]}")" "$(load)"
	row "$n: find / raw walk with the SDK's XML decoding (last round)" "$(ratio "$tf" "$rawsdk")" "$(load)"
	fi
	row "$n: mount RSS after the find (MiB)" "$(rss_mib "$ck")" "$(load)"
	sleep 30
	row "$n: mount RSS 30 s after the find (MiB)" "$(rss_mib "$ck")" "$(load)"
	fusermount3 -u "$mnt" 2>/dev/null || fusermount3 -uz "$mnt" || true
	kill "$ck" 2>/dev/null || true
	wait "$ck" 2>/dev/null || true
	# A no-change sync of the index the mount left, alone (the mount's syncs share the proxy's count
	# with the loss check's listings).
	proxy_ops >/dev/null
	l=$(load); t0=$(now)
	/usr/bin/time -f 'maxrss_kib %M' -o "$WORK/sync-$n.time" "$WORK/ckguard" index sync --store s3://bench --index "$idx" \
		--map "file:$DATA/bench=" --s3-endpoint "$PEP" --s3-path-style --s3-region us-east-1 >"$WORK/sync-$n.txt" 2>&1 ||
		{ echo "bench-s3-scale: index sync failed: $(tail -5 "$WORK/sync-$n.txt")" >&2; exit 1; }
	row "$n: no-change index sync at $LAT, unmounted (s)" "$(since "$t0")" "$l"
	row "$n:   its requests, peak RSS (MiB)" "$(proxy_ops), $(awk '/maxrss_kib/{printf "%d", $2/1024}' "$WORK/sync-$n.time")" "$(load)"
	row "$n:   index on disk (MiB)" "$(du -sm "$idx" | cut -f1)" "$(load)"
}
[ "$SMALL_N" -gt 0 ] && phase "$SMALL_N" "$SOAK_SMALL"
[ "$SCALE_N" -gt 0 ] && phase "$SCALE_N" "$SOAK"
echo
echo "== bench-s3-scale: mount figures (versitygw posix on 127.0.0.1 behind $LAT per request, --sync-interval $SYNC)"
cat "$REPORT"
