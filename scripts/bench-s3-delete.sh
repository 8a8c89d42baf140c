#!/usr/bin/env bash
# Deletion at S3 latency (issue 15): rm -rf of BENCH_S3_DEL_N (10000) unreferenced objects through the
# ckguard mount vs `aws s3 rm --recursive` vs s3fs vs rclone mount (BENCH_S3_PEER_N objects, 1000: they
# delete one object at a time), with the test proxy adding 0 ms and then 20 ms to every request, one run,
# per-object ratios printed. Targets at 20 ms: ckguard <= 1.0x aws s3 rm, >= 10x faster than s3fs.
# Needs what scripts/setup.sh installs (versitygw, awscli, fuse3, s3fs, rclone) and root for FUSE.
set -euo pipefail
cd "$(dirname "$0")/.."
for tool in /usr/bin/aws fusermount3 s3fs rclone; do
	command -v "$tool" >/dev/null || echo "bench-s3-delete: $tool missing (scripts/setup.sh installs it); its figures are skipped" >&2
done
CKGUARD_BENCH_S3_DELETE=1 go test -count=1 -timeout 3h -run '^TestS3DeleteBench$' -v ./integration/ 2>&1 |
	grep -v '^\s*$' | grep -Ev '^(=== RUN|--- PASS|PASS|ok )' || true
