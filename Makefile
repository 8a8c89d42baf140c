# ckguard — see README.md. `make setup` installs everything; `make test` is the test command CI runs.
# Each target installs only what it uses (scripts/setup.sh PROFILE): test needs no Java, Maven, Flink
# artifacts, s3fs or rclone; e2e and bench install those.
SHELL := /bin/bash
GO ?= go
TOOLS := $(CURDIR)/.tools/bin
export PATH := $(TOOLS):$(PATH)
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null)
# Stamped into every build, so `ckguard version` names the commit (also with GOFLAGS=-buildvcs=false).
STAMP := -X main.version=$(VERSION) -X main.revision=$(REVISION)
LDFLAGS := -s -w $(STAMP)

.PHONY: setup setup-test setup-lint setup-e2e setup-bench setup-hdfs setup-demo build docs test test-hdfs unit lint bench fuzz e2e demo release clean

# Everything the build, tests, benchmarks and demo need (Debian packages, Go modules, versitygw,
# staticcheck, Flink artifacts). Idempotent: a second run only checks.
setup:
	./scripts/setup.sh all

# What the test suite needs (FUSE, getfattr, Graphviz, AWS CLI, versitygw, systemd-analyze).
setup-test:
	./scripts/setup.sh test

setup-lint:
	./scripts/setup.sh lint

# The test set plus Java 17, Maven and the Flink artifacts.
setup-e2e:
	./scripts/setup.sh e2e

# The test set plus s3fs and rclone (the S3 benchmarks compare against them).
setup-bench:
	./scripts/setup.sh bench

# The e2e set plus the Hadoop 3.5.0 artifacts: a real HDFS (MiniDFSCluster) for the HDFS tests, and
# Flink's hdfs:// file system for the HDFS end-to-end tests.
setup-hdfs:
	./scripts/setup.sh hdfs

# The subset the demo needs (fuse3, attr, graphviz, Go modules): fast on a fresh machine.
setup-demo:
	./scripts/setup.sh demo

build:
	$(GO) build -ldflags '$(STAMP)' -o bin/ckguard ./cmd/ckguard

# The full test suite: unit tests, fuzz seeds, real FUSE mounts, real S3 server (versitygw).
# Depends on setup-test so that `make test` alone works on a fresh machine.
test: setup-test build
	$(GO) vet ./...
	$(GO) test -count=1 -timeout 40m ./...

# The tests against a real HDFS (a MiniDFSCluster in a JVM; build tag hdfs, so make test, which runs
# without Java, never compiles them): every test of the HDFS store and mount, and the HDFS tests of
# integration/ (the real-Flink ones among them run in make e2e).
test-hdfs: setup-hdfs build
	$(GO) vet -tags hdfs ./hdfsbackend/... ./integration/
	$(GO) test -tags hdfs -count=1 -timeout 30m ./hdfsbackend/...
	$(GO) test -tags hdfs -count=1 -timeout 30m ./integration/ -run 'HDFS'

# Fast unit tests only (no mounts, no servers).
unit:
	$(GO) test -short -count=1 ./...

lint: setup-lint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	staticcheck ./...

# Benchmarks: Go benchmarks plus side-by-side scripted runs that print ratios.
bench: setup-bench build
	$(GO) test -run '^$$' -bench . -benchmem -count=1 -timeout 60m ./...
	@for s in scripts/bench-*.sh; do [ -x "$$s" ] && { echo "== $$s"; "$$s"; } || true; done

# FUZZTIME=10m make fuzz runs every fuzz target (every package that has one) for that long.
FUZZTIME ?= 30s
# Every package with a Fuzz target, found rather than listed, so a new one is never left out.
FUZZ_PKGS = $(sort $(dir $(shell grep -rl --include='*_test.go' '^func Fuzz' .)))
fuzz:
	@for p in $(FUZZ_PKGS); do \
		for t in $$($(GO) test -list '^Fuzz' $$p | grep ^Fuzz); do \
			$(GO) test -run '^$$' -fuzz "^$$t$$" -fuzztime $(FUZZTIME) -fuzzminimizetime 3s -timeout 0 -parallel 1 $$p || exit 1; done; done

# End-to-end tests against real Flink (Maven Central) on a local MiniCluster; the HDFS ones write
# hdfs:// checkpoints to a MiniDFSCluster (build tag hdfs).
e2e: setup-e2e setup-hdfs build
	CKGUARD_E2E=1 $(GO) test -count=1 -timeout 50m -v ./integration/ -run 'E2E'
	CKGUARD_E2E=1 $(GO) test -tags hdfs -count=1 -timeout 40m -v ./integration/ -run 'E2EHDFS'

demo: setup-demo build
	./bin/ckguard demo
	@echo "make demo: the binary is ./bin/ckguard; run 'export PATH=\$$PWD/bin:\$$PATH' here to use the README's ckguard commands as written"

# Regenerate what is generated from the code: docs/CONFIG.md from the CLI's flags (cmd/ckguard
# TestConfigReference fails until it matches). Run after adding or changing a flag.
docs:
	$(GO) test -count=1 -run '^TestConfigReference$$' ./cmd/ckguard/ -update

release:
	mkdir -p dist
	CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/ckguard-linux-amd64 ./cmd/ckguard
	CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o dist/ckguard-linux-arm64 ./cmd/ckguard

clean:
	rm -rf bin dist
