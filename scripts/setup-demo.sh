#!/usr/bin/env bash
# The part of setup.sh that `make demo` needs on a fresh Debian/Ubuntu machine: fuse3 (fusermount3),
# attr (getfattr), graphviz (ckguard graph) and the Go modules. Fast and idempotent: a second run only
# checks. The full `make setup` also installs the test servers and Flink artifacts (minutes).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
for p in fuse3 attr graphviz; do
	dpkg -s "$p" >/dev/null 2>&1 || need+=("$p")
done
if ((${#need[@]})); then
	echo "setup-demo: installing Debian packages: ${need[*]}"
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
command -v fusermount3 >/dev/null || { echo "setup-demo: fusermount3 missing after installing fuse3" >&2; exit 1; }
if [ ! -e /dev/fuse ]; then
	echo "setup-demo: /dev/fuse is missing; in a container run with --device /dev/fuse --cap-add SYS_ADMIN" >&2
	exit 1
fi
go mod download
