#!/usr/bin/env bash
# HDFS side by side on one MiniDFSCluster (issue 17): listing BENCH_HDFS_FILES (100000) files and deleting
# BENCH_HDFS_DEL_N (10000) of them. Java figures: `hdfs dfs -ls -R` (Hadoop's FsShell; own JVM wall clock
# and inside a warm JVM), FileSystem.listFiles, FileSystem.delete one file at a time in one warm JVM (the
# per-file floor) and `hdfs dfs -rm -r -skipTrash` (one recursive RPC: the lower bound). The ckguard mount
# and raw Go client columns print next to them with ratios, when built; the raw Go listing and find through
# the mount alternate BENCH_HDFS_ROUNDS (3) times and their medians are compared. Needs `make setup-hdfs`
# (Java 17 and the Hadoop 3.5.0 artifacts).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v java >/dev/null || { echo "bench-hdfs: java missing: run make setup-hdfs" >&2; exit 1; }
CKGUARD_BENCH_HDFS=1 go test -tags hdfs -count=1 -timeout 2h -run '^TestHDFSBench$' -v ./integration/ 2>&1 |
	grep -v '^\s*$' | grep -Ev '^(=== RUN|--- PASS|PASS|ok )' || true
