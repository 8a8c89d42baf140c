#!/usr/bin/env bash
# Installs what ckguard's build, tests, benchmarks and demo need on a fresh Debian 12 machine, by
# purpose, so that each make target installs only what it uses:
#
#   setup.sh demo    what make demo needs, fast: FUSE, getfattr, Graphviz (ckguard graph), the Go modules
#   setup.sh test    the test suite (make test): FUSE, getfattr and setfacl, mkfs.ext4 (the ioctl tests' own
#                    loop-mounted store), Graphviz, the AWS CLI and versitygw for the S3 tests, python3 and
#                    curl as test clients, systemd-analyze for the unit check, promtool (Debian ships
#                    it in prometheus) for docs/monitoring's alerting rules
#   setup.sh lint    staticcheck (make lint)
#   setup.sh e2e     test + Java 17, Maven and the Flink artifacts (make e2e; ~500 MB from Maven Central)
#   setup.sh bench   test + s3fs and rclone, the S3 benchmarks' comparison clients (make bench)
#   setup.sh minio   test + MinIO (a second S3 server: the versioned-bucket quarantine checks there that a
#                    restore keeps Last-Modified, which versitygw's posix backend resets; ~2 min, ~2 GB of
#                    module and build cache on a cold machine)
#   setup.sh hdfs    e2e + the Hadoop 3.5.0 artifacts (~145 MB): the MiniDFSCluster launcher (and its MiniKdc) of the HDFS
#                    tests (make test-hdfs) and Flink's hdfs:// file system (the HDFS e2e tests)
#   setup.sh posix   test + pjdfstest, the POSIX suite scripts/posix-suite.sh runs (needs cargo, Rust >= 1.85)
#   setup.sh all     everything (make setup; the default)
#   setup.sh --list PROFILE   print what PROFILE installs, one item a line, and change nothing
#
# Idempotent: a second run only checks. Tools land in .tools/bin (not on the system PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS="$PWD/.tools/bin"

list=""
if [ "${1:-}" = --list ]; then list=1; shift; fi
profile=${1:-all}

# Debian packages and steps per purpose; a profile is a union of purposes.
demo_pkgs=(fuse3 attr graphviz)
test_pkgs=(fuse3 attr acl e2fsprogs graphviz awscli curl python3 systemd prometheus)
e2e_pkgs=(openjdk-17-jdk-headless maven)
bench_pkgs=(s3fs rclone)
case $profile in
demo) purposes=(demo) ;;
test) purposes=(test) ;;
lint) purposes=(lint) ;;
e2e) purposes=(test e2e) ;;
bench) purposes=(test bench) ;;
posix) purposes=(test posix) ;;
hdfs) purposes=(test e2e hdfs) ;;
minio) purposes=(test minio) ;;
all) purposes=(test lint e2e bench posix hdfs minio) ;;
*) echo "setup: unknown profile $profile (want demo, test, lint, e2e, bench, posix, hdfs, minio or all)" >&2; exit 2 ;;
esac
has() { local p; for p in "${purposes[@]}"; do [ "$p" = "$1" ] && return 0; done; return 1; }

pkgs=() steps=(go-modules)
if has demo; then pkgs+=("${demo_pkgs[@]}"); steps+=(fuse-conf); fi
if has test; then pkgs+=("${test_pkgs[@]}"); steps+=(fuse-conf versitygw); fi
if has lint; then steps+=(staticcheck); fi
if has e2e; then pkgs+=("${e2e_pkgs[@]}"); steps+=(flink-artifacts); fi
if has bench; then pkgs+=("${bench_pkgs[@]}"); fi
if has posix; then steps+=(pjdfstest); fi
if has hdfs; then steps+=(hadoop-artifacts); fi
if has minio; then steps+=(minio); fi
if [ -n "$list" ]; then
	((${#pkgs[@]} == 0)) || printf 'package %s\n' "${pkgs[@]}"
	printf 'step %s\n' "${steps[@]}"
	exit 0
fi
step() { local s; for s in "${steps[@]}"; do [ "$s" = "$1" ] && return 0; done; return 1; }

mkdir -p "$TOOLS"
need_pkgs=()
for p in "${pkgs[@]}"; do
	dpkg -s "$p" >/dev/null 2>&1 || need_pkgs+=("$p")
done
if ((${#need_pkgs[@]})); then
	echo "setup ($profile): installing Debian packages: ${need_pkgs[*]}"
	SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO=sudo
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_pkgs[@]}" >/dev/null
fi
if step fuse-conf; then
	# fusermount must exist for go-fuse to unmount as non-root and for `ckguard umount`.
	command -v fusermount3 >/dev/null || { echo "setup: fusermount3 missing after installing fuse3" >&2; exit 1; }
	if [ ! -e /dev/fuse ]; then
		echo "setup: /dev/fuse is missing; in a container run with --device /dev/fuse --cap-add SYS_ADMIN" >&2
		exit 1
	fi
	# go-fuse's --allow-other needs user_allow_other in /etc/fuse.conf.
	if [ -w /etc/fuse.conf ] && ! grep -q '^user_allow_other' /etc/fuse.conf; then
		echo user_allow_other >>/etc/fuse.conf
	fi
fi

echo "setup ($profile): Go modules"
go mod download

if step staticcheck && [ ! -x "$TOOLS/staticcheck" ]; then
	echo "setup: staticcheck"
	GOBIN="$TOOLS" go install honnef.co/go/tools/cmd/staticcheck@v0.8.2
fi
if step versitygw && [ ! -x "$TOOLS/versitygw" ]; then
	echo "setup: versitygw (test S3 server; about a minute on a cold cache)"
	GOBIN="$TOOLS" go install github.com/versity/versitygw/cmd/versitygw@v1.8.0
fi
if step minio && [ ! -x "$TOOLS/minio" ]; then
	echo "setup: minio (second S3 test server, for the versioned-bucket tests; a few minutes on a cold cache)"
	GOBIN="$TOOLS" go install github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c
fi
if step pjdfstest && [ ! -x "$TOOLS/pjdfstest" ]; then
	# The POSIX conformance suite scripts/posix-suite.sh runs against the mounts (the Rust rewrite; it needs
	# Rust 1.85 or later, which Debian 12's cargo is not).
	CARGO=$(command -v cargo || echo "$HOME/.cargo/bin/cargo")
	[ -x "$CARGO" ] || { echo "setup: cargo (Rust 1.85 or later) is needed to install pjdfstest" >&2; exit 1; }
	echo "setup: pjdfstest (POSIX conformance suite; a few minutes on a cold cache)"
	"$CARGO" install --quiet --locked pjdfstest --version 0.2.2 --root "$PWD/.tools"
fi
if step flink-artifacts && [ -f integration/flink/pom.xml ] && [ "${CKGUARD_SKIP_MAVEN:-}" != 1 ]; then
	echo "setup: Maven artifacts for the Flink end-to-end tests"
	(cd integration/flink && ./prefetch.sh)
fi
if step hadoop-artifacts && [ "${CKGUARD_SKIP_MAVEN:-}" != 1 ]; then
	echo "setup: Maven artifacts for the HDFS tests (Hadoop 3.5.0 MiniDFSCluster; Flink's hdfs:// file system)"
	hdfsbackend/hdfstest/minidfs/java/prefetch.sh
	(cd integration/flink && ./prefetch.sh 1.20+hdfs 2.2+hdfs)
fi
echo "setup ($profile): done"
