#!/usr/bin/env bash
# Checks `make release`: static linux/amd64 and linux/arm64 binaries (no ELF interpreter, CGO off)
# stamped with the version. CI runs it after `make test`; it takes a couple of minutes on 2 cores.
set -euo pipefail
cd "$(dirname "$0")/.."
want="${VERSION:-v0.0.0-release-check}"
make release VERSION="$want"
fail=0
check() { # check FILE MACHINE
	local f=$1 machine=$2
	[ -x "$f" ] || { echo "check-release: $f missing" >&2; fail=1; return; }
	if ! readelf -h "$f" | grep -q "Machine:.*$machine"; then
		echo "check-release: $f is not a $machine binary: $(readelf -h "$f" | grep Machine)" >&2; fail=1
	fi
	if readelf -l "$f" | grep -q INTERP; then
		echo "check-release: $f is dynamically linked (has an ELF interpreter)" >&2; fail=1
	fi
	if ! go version -m "$f" | grep -q 'CGO_ENABLED=0'; then
		echo "check-release: $f was not built with CGO_ENABLED=0" >&2; fail=1
	fi
	echo "check-release: $f: $machine, static, $(du -h "$f" | cut -f1)"
}
check dist/ckguard-linux-amd64 "X86-64"
check dist/ckguard-linux-arm64 "AArch64"
if [ "$(uname -m)" = x86_64 ]; then
	got=$(dist/ckguard-linux-amd64 version)
	case "$got" in
	"ckguard $want "*) echo "check-release: $got" ;;
	*) echo "check-release: version not stamped: $got (want $want)" >&2; fail=1 ;;
	esac
fi
exit $fail
