#!/usr/bin/env bash
# Side-by-side S3 benchmarks for issue 5, one run, ratios printed (run by `make bench`).
#
# One versitygw (posix backend) on 127.0.0.1 serves every client, so the only difference is the client:
#   listing:  find -type f over LIST_N objects in one shared/ folder: ckguard mount vs a raw ListObjectsV2
#             walk (s3backend/internal/cmd/s3raw) vs s3fs vs rclone mount
#   deletion: rm -rf of DEL_N unreferenced objects through ckguard vs `aws s3 rm --recursive` vs s3fs
#             vs rclone mount
#   reading:  sequential copy of a READ_MB MiB object through ckguard vs `aws s3 cp`
# Targets: listing <= 1.3x raw walk, deletion <= 1.5x aws s3 rm, read throughput >= 0.9x aws s3 cp,
# faster than s3fs and rclone on listing and deletion.
#
# Objects are created as files in versitygw's posix data directory (that is how the posix backend stores
# objects; creating 100,000 of them through PUTs would take minutes and measure nothing of interest).
# Sizes: BENCH_S3_LIST_N (100000), BENCH_S3_DEL_N (10000), BENCH_S3_READ_MB (1024); BENCH_S3_TIMEOUT bounds
# each timed step of s3fs/rclone (default 900 s; a timeout is reported, not hidden).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
LIST_N=${BENCH_S3_LIST_N:-100000}
DEL_N=${BENCH_S3_DEL_N:-10000}
READ_MB=${BENCH_S3_READ_MB:-1024}
TIMEOUT=${BENCH_S3_TIMEOUT:-900}
AWS=/usr/bin/aws # a pyenv shim may shadow `aws`
VGW=${CKGUARD_VERSITYGW:-$ROOT/.tools/bin/versitygw}

for tool in "$VGW" "$AWS" fusermount3 python3; do
	command -v "$tool" >/dev/null || { echo "bench-s3: $tool missing (run make setup)" >&2; exit 1; }
done
[ -e /dev/fuse ] || { echo "bench-s3: /dev/fuse missing" >&2; exit 1; }
HAVE_S3FS=0; command -v s3fs >/dev/null && HAVE_S3FS=1
HAVE_RCLONE=0; command -v rclone >/dev/null && HAVE_RCLONE=1

WORK=$(mktemp -d /tmp/ckguard-bench-s3.XXXXXX)
PIDS=()
MOUNTS=()
cleanup() {
	for m in "${MOUNTS[@]}"; do fusermount3 -uz "$m" 2>/dev/null || fusermount -uz "$m" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$WORK"
}
trap cleanup EXIT

now() { date +%s.%N; }
elapsed() { python3 -c "import sys; print(f'{float(sys.argv[2])-float(sys.argv[1]):.3f}')" "$1" "$2"; }
ratio() { python3 -c "import sys; a,b=sys.argv[1],sys.argv[2]; print('n/a' if 'n/a' in (a,b) or a.startswith('>') or b.startswith('>') or float(b)==0 else f'{float(a)/float(b):.2f}')" "$1" "$2"; }
wait_mount() { # mountpoint pid
	for _ in $(seq 1 600); do
		if grep -q " $1 fuse" /proc/mounts; then return 0; fi
		kill -0 "$2" 2>/dev/null || { echo "bench-s3: mount of $1 exited" >&2; return 1; }
		sleep 0.1
	done
	echo "bench-s3: $1 not mounted after 60 s" >&2; return 1
}
umount_wait() { # mountpoint pid
	fusermount3 -u "$1" 2>/dev/null || fusermount -u "$1" 2>/dev/null || fusermount3 -uz "$1" 2>/dev/null || true
	kill "$2" 2>/dev/null || true
	wait "$2" 2>/dev/null || true
}
# timed NAME CMD...: runs CMD with a timeout, sets T_NAME to seconds or ">TIMEOUT".
timed() {
	local name=$1; shift
	local t0 t1 rc=0
	printf -v "L_$name" '%s' "$(cut -d' ' -f1 /proc/loadavg)"
	t0=$(now)
	timeout "$TIMEOUT" "$@" >"$WORK/$name.out" 2>&1 || rc=$?
	t1=$(now)
	if [ "$rc" = 124 ]; then
		printf -v "T_$name" '>%s' "$TIMEOUT"
	else
		printf -v "T_$name" '%s' "$(elapsed "$t0" "$t1")"
		[ "$rc" = 0 ] || echo "bench-s3: $name exited $rc: $(head -c 300 "$WORK/$name.out")" >&2
	fi
}

echo "bench-s3: building ckguard and s3raw"
go build -o "$WORK/ckguard" ./cmd/ckguard
go build -o "$WORK/s3raw" ./s3backend/internal/cmd/s3raw

PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
EP=http://127.0.0.1:$PORT
mkdir -p "$WORK/data"
# --keep-alive: versitygw closes every connection by default; S3 services keep them open, and every
# client here (ckguard, aws-cli, s3fs, rclone) reuses connections when allowed.
"$VGW" --access testkey --secret testsecret --port "127.0.0.1:$PORT" --health /health --quiet --keep-alive posix "$WORK/data" &
PIDS+=($!)
for _ in $(seq 1 200); do curl -fsS "$EP/health" >/dev/null 2>&1 && break; sleep 0.05; done
export AWS_ACCESS_KEY_ID=testkey AWS_SECRET_ACCESS_KEY=testsecret AWS_DEFAULT_REGION=us-east-1 AWS_REGION=us-east-1 \
	AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true AWS_PAGER=
"$AWS" --endpoint-url "$EP" s3 mb s3://bench >/dev/null

echo "bench-s3: creating $LIST_N + 4x$DEL_N objects and a $READ_MB MiB object"
# Each file gets the ETag xattr a PUT would have stored (user.etag, versitygw posix): like every real S3
# object it has an ETag, which listings report and conditional requests use.
python3 - "$WORK/data/bench" "$LIST_N" "$DEL_N" <<'PY'
import hashlib, os, sys, time
root, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
old = time.time() - 30 * 86400
body = b"ckguard-bench-sst"
etag = hashlib.md5(body).hexdigest().encode()
def make(folder, count, name):
    os.makedirs(folder, exist_ok=True)
    for i in range(count):
        p = os.path.join(folder, name % i)
        with open(p, "wb") as f:
            f.write(body)
        os.setxattr(p, "user.etag", etag)
        os.utime(p, (old, old))
make(os.path.join(root, "list/job/shared"), n, "sst-%07d.sst")
for c in ("ckguard", "aws", "s3fs", "rclone"):
    make(os.path.join(root, "del-" + c, "job/chk-1"), d, "state-%07d")
PY
mkdir -p "$WORK/data/bench/read"
head -c "$((READ_MB << 20))" /dev/urandom >"$WORK/data/bench/read/big"
python3 -c 'import hashlib,os,sys; h=hashlib.md5(); f=open(sys.argv[1],"rb"); [h.update(b) for b in iter(lambda: f.read(1<<20), b"")]; os.setxattr(sys.argv[1],"user.etag",h.hexdigest().encode())' "$WORK/data/bench/read/big"
sync

count_keys() { "$WORK/s3raw" walk --endpoint "$EP" --bucket bench --prefix "$1" | cut -d' ' -f1; }

# The machine may be shared: every figure is printed with the load average around it.
loadavg() { cut -d' ' -f1-3 /proc/loadavg; }
LOAD_START=$(loadavg)

# 1. Raw ListObjectsV2 walk.
L_raw_list=$(cut -d' ' -f1 /proc/loadavg)
read -r n T_raw_list < <("$WORK/s3raw" walk --endpoint "$EP" --bucket bench --prefix list)
[ "$n" = "$LIST_N" ] || { echo "bench-s3: raw walk saw $n objects, want $LIST_N" >&2; exit 1; }

# 2. ckguard.
MNT=$WORK/mnt-ckguard; mkdir -p "$MNT"
"$WORK/ckguard" mount --foreground --store s3://bench --index "$WORK/index" --grace 0s --sync-interval 1h \
	--s3-endpoint "$EP" --s3-path-style --s3-region us-east-1 "$MNT" >"$WORK/ckguard.log" 2>&1 &
CK=$!; PIDS+=("$CK"); MOUNTS+=("$MNT")
wait_mount "$MNT" "$CK"
timed ck_list sh -c "find '$MNT/list' -type f | wc -l"
[ "$(tr -d ' ' <"$WORK/ck_list.out")" = "$LIST_N" ] || echo "bench-s3: ckguard find saw $(cat "$WORK/ck_list.out") files" >&2
timed ck_del rm -rf "$MNT/del-ckguard"
left=$(count_keys del-ckguard); [ "$left" = 0 ] || echo "bench-s3: $left objects left after rm -rf through ckguard" >&2
timed ck_read cp "$MNT/read/big" "$WORK/out"
cmp -s "$WORK/out" "$WORK/data/bench/read/big" || echo "bench-s3: ckguard read differs" >&2
rm -f "$WORK/out"
umount_wait "$MNT" "$CK"

# 3. aws-cli.
timed aws_del "$AWS" --endpoint-url "$EP" s3 rm --recursive --only-show-errors s3://bench/del-aws/
timed aws_read "$AWS" --endpoint-url "$EP" s3 cp --only-show-errors s3://bench/read/big "$WORK/out"
rm -f "$WORK/out"

# 4. s3fs.
T_s3fs_list=n/a; T_s3fs_del=n/a
if [ "$HAVE_S3FS" = 1 ]; then
	MNT=$WORK/mnt-s3fs; mkdir -p "$MNT"
	echo "testkey:testsecret" >"$WORK/passwd"; chmod 600 "$WORK/passwd"
	s3fs bench "$MNT" -f -o "url=$EP" -o use_path_request_style -o "passwd_file=$WORK/passwd" -o endpoint=us-east-1 \
		>"$WORK/s3fs.log" 2>&1 &
	S3FS=$!; PIDS+=("$S3FS"); MOUNTS+=("$MNT")
	if wait_mount "$MNT" "$S3FS"; then
		timed s3fs_list sh -c "find '$MNT/list' -type f | wc -l"
		timed s3fs_del rm -rf "$MNT/del-s3fs"
	fi
	umount_wait "$MNT" "$S3FS"
fi

# 5. rclone mount (connection-string remote, no config file).
T_rclone_list=n/a; T_rclone_del=n/a
if [ "$HAVE_RCLONE" = 1 ]; then
	MNT=$WORK/mnt-rclone; mkdir -p "$MNT"
	# AWS_CA_BUNDLE (set on some hosts) breaks rclone 1.60's S3 client ("unsupported transport"); plain http needs none.
	env -u AWS_CA_BUNDLE rclone mount --config /dev/null \
		":s3,provider=Other,env_auth=false,access_key_id=testkey,secret_access_key=testsecret,region=us-east-1,endpoint='$EP':bench" \
		"$MNT" >"$WORK/rclone.log" 2>&1 &
	RC=$!; PIDS+=("$RC"); MOUNTS+=("$MNT")
	if wait_mount "$MNT" "$RC"; then
		timed rclone_list sh -c "find '$MNT/list' -type f | wc -l"
		timed rclone_del rm -rf "$MNT/del-rclone"
	fi
	umount_wait "$MNT" "$RC"
fi

mbps() { python3 -c "import sys; t=sys.argv[2]; print('n/a' if t.startswith('>') else f'{float(sys.argv[1])/float(t):.0f}')" "$READ_MB" "$1"; }
echo
msper() { python3 -c "import sys; t=sys.argv[1]; print('n/a' if t=='n/a' or t.startswith('>') else f'{float(t)*1000/int(sys.argv[2]):.2f}')" "$1" "$DEL_N"; }
echo "== bench-s3: versitygw posix on 127.0.0.1, $(nproc) cores, load average $LOAD_START at the start, $(loadavg) at the end"
printf '%-44s %12s\n' "measurement" "seconds"  # [load]: 1-minute load average when the step started
printf '%-44s %12s  [load %s]\n' "list $LIST_N: raw ListObjectsV2 walk" "$T_raw_list" "${L_raw_list:-n/a}"
printf '%-44s %12s  [load %s]\n' "list $LIST_N: find -type f via ckguard" "$T_ck_list" "${L_ck_list:-n/a}"
printf '%-44s %12s  [load %s]\n' "list $LIST_N: find -type f via s3fs" "$T_s3fs_list" "${L_s3fs_list:-n/a}"
printf '%-44s %12s  [load %s]\n' "list $LIST_N: find -type f via rclone mount" "$T_rclone_list" "${L_rclone_list:-n/a}"
printf '%-44s %12s  (%s ms/object)  [load %s]\n' "delete $DEL_N: rm -rf via ckguard" "$T_ck_del" "$(msper "$T_ck_del")" "${L_ck_del:-n/a}"
printf '%-44s %12s  (%s ms/object)  [load %s]\n' "delete $DEL_N: aws s3 rm --recursive" "$T_aws_del" "$(msper "$T_aws_del")" "${L_aws_del:-n/a}"
printf '%-44s %12s  (%s ms/object)  [load %s]\n' "delete $DEL_N: rm -rf via s3fs" "$T_s3fs_del" "$(msper "$T_s3fs_del")" "${L_s3fs_del:-n/a}"
printf '%-44s %12s  (%s ms/object)  [load %s]\n' "delete $DEL_N: rm -rf via rclone mount" "$T_rclone_del" "$(msper "$T_rclone_del")" "${L_rclone_del:-n/a}"
printf '%-44s %12s  (%s MiB/s)  [load %s]\n' "read $READ_MB MiB: cp via ckguard" "$T_ck_read" "$(mbps "$T_ck_read")" "${L_ck_read:-n/a}"
printf '%-44s %12s  (%s MiB/s)  [load %s]\n' "read $READ_MB MiB: aws s3 cp" "$T_aws_read" "$(mbps "$T_aws_read")" "${L_aws_read:-n/a}"
echo
echo "ratios (target):"
echo "  listing  ckguard / raw walk          = $(ratio "$T_ck_list" "$T_raw_list")   (<= 1.3)"
echo "  listing  ckguard / s3fs              = $(ratio "$T_ck_list" "$T_s3fs_list")   (< 1)"
echo "  listing  ckguard / rclone            = $(ratio "$T_ck_list" "$T_rclone_list")   (< 1)"
echo "  deletion ckguard / aws s3 rm         = $(ratio "$T_ck_del" "$T_aws_del")   (<= 1.5)"
echo "  deletion ckguard / s3fs              = $(ratio "$T_ck_del" "$T_s3fs_del")   (< 1)"
echo "  deletion ckguard / rclone            = $(ratio "$T_ck_del" "$T_rclone_del")   (< 1)"
echo "  read     ckguard / aws s3 cp (speed) = $(ratio "$T_aws_read" "$T_ck_read")   (>= 0.9)"
