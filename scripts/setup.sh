#!/usr/bin/env bash
# Installs everything ckguard's build, tests, benchmarks and demo need on a fresh Debian 12 machine.
# Idempotent: a second run only checks. Tools land in .tools/bin (not on the system PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools/bin"
mkdir -p "$TOOLS"

need_pkgs=()
for p in fuse3 awscli graphviz s3fs rclone attr curl python3 openjdk-17-jdk-headless maven; do
	dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
	echo "setup: installing Debian packages: ${need_pkgs[*]}"
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
# fusermount must exist for go-fuse to unmount as non-root and for `ckguard umount`.
command -v fusermount3 >/dev/null || { echo "setup: fusermount3 missing after installing fuse3" >&2; exit 1; }
# go-fuse's --allow-other needs user_allow_other in /etc/fuse.conf.
if [ -w /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
	echo user_allow_other >>/etc/fuse.conf
fi

echo "setup: Go modules"
go mod download

if [ ! -x "$TOOLS/staticcheck" ]; then
	echo "setup: staticcheck"
	GOBIN="$TOOLS" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
if [ ! -x "$TOOLS/versitygw" ]; then
	echo "setup: versitygw (test S3 server; about a minute on a cold cache)"
	GOBIN="$TOOLS" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
if [ ! -x "$TOOLS/pjdfstest" ]; then
	# The POSIX conformance suite scripts/posix-suite.sh runs against the mounts (the Rust rewrite; it needs
	# Rust 1.85 or later, which Debian 12's cargo is not).
	CARGO=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
	[ -x "$CARGO" ] || { echo "setup: cargo (Rust 1.85 or later) is needed to install pjdfstest" >&2; exit 1; }
	echo "setup: pjdfstest (POSIX conformance suite; a few minutes on a cold cache)"
	"$CARGO" install --quiet --locked pjdfstest --version 0.2.2 --root "$PWD/.tools"
fi

if [ -f integration/flink/pom.xml ] && [ "${CKGUARD_SKIP_MAVEN:-}" != 1 ]; then
	echo "setup: Maven artifacts for the Flink end-to-end tests"
	(cd integration/flink && ./prefetch.sh)
fi
echo "setup: done"
