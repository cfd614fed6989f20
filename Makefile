# outpost — build, test, benchmark.
GO ?= go

.PHONY: all build test fmt-check vet unit testsummary demo bench bench-wan fuzz e2e vm-kernel soak cross-check release go-install-check

all: build

# outpost, and beside it the dedicated sandbox helper it picks up (faster
# sandboxed starts than re-executing outpost). Static (no cgo): a helper
# linked against libc starts about 0.5 ms slower, on every sandboxed command.
# The commit is stamped by hand: GOFLAGS may turn VCS stamping off.
COMMIT := $(shell git rev-parse HEAD 2>/dev/null)
build:
	CGO_ENABLED=0 $(GO) build -ldflags "-X main.commit=$(COMMIT)" -o bin/outpost ./cmd/outpost
	CGO_ENABLED=0 $(GO) build -o bin/outpost-sandbox ./cmd/outpost-sandbox

# The README's test command: formatting, vet, and every unit test under
# the race detector. A test whose dependency (etcd, codex, zsh, a sandboxing
# kernel, ...) is missing skips, or fails for the classes OUTPOST_REQUIRE
# names (internal/testdeps; .ci/run names all it installs).
test: fmt-check vet unit

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# go test's output, then per package how many tests ran, passed, failed and
# skipped (under OUTPOST_REQUIRE, each skipped test and why); go test's exit
# status.
TESTSUMMARY := .cache/testsummary
testsummary:
	$(GO) build -o $(TESTSUMMARY) ./internal/testdeps/cmd/testsummary

# The tests run with HOME set to an empty directory (go keeps its own
# cache, module cache and settings): the shells they start, login and
# interactive ones among them, must not read the dotfiles of whoever runs
# them. A ~/.bashrc that runs `pyenv init` made every login shell wait 60 s
# for a lock left behind by a killed shell, and codex's exec_command gave
# up on each after 10. The directory is not under /tmp: codex's Linux
# sandbox, whose helper lives in $CODEX_HOME (~/.codex), denies every
# sandboxed command when that is under /tmp.
TESTHOME = home=$$(mktemp -d /var/tmp/outpost-test-home.XXXXXX) && trap 'rm -rf "$$home"' EXIT && \
	export GOENV="$$($(GO) env GOENV)" GOCACHE="$$($(GO) env GOCACHE)" \
	GOMODCACHE="$$($(GO) env GOMODCACHE)" GOPATH="$$($(GO) env GOPATH)" && \
	export HOME="$$home" &&
unit: testsummary
	@$(TESTHOME) $(TESTSUMMARY) -go "$(GO)" -- -race -count=1 ./...

demo:
	$(GO) run ./cmd/outpost demo

# Side-by-side benchmarks in one run: the local limit, outpost (in-process,
# direct, ws, relay), codex exec-server, ssh (fresh and ControlMaster) and
# bubblewrap; installs missing peers. A Markdown table on stdout, JSON in
# .bench/results.json.
bench:
	mkdir -p .bench
	$(GO) run ./bench --json .bench/results.json

# The same peers over emulated WAN links (root: network namespaces and TUN
# devices; bench/wan/README.md): regional, intercontinental and lossy
# profiles in about 5 minutes (WANFLAGS=-quick: about 3). Markdown on
# stdout, JSON in .bench/wan.json.
WANFLAGS ?=
bench-wan:
	mkdir -p .bench
	$(GO) run ./bench/wan -json .bench/wan.json $(WANFLAGS)

# Each fuzz target for FUZZTIME (default 20s).
FUZZTIME ?= 20s
fuzz:
	bash scripts/fuzz.sh $(FUZZTIME)

# End-to-end tests with docker compose (needs a Docker engine, docker-compose
# and busybox-static): e2e/docker-compose.yml, and deploy/'s operator stack
# brought up as deploy/README.md says, driven by e2e/.
e2e: vm-kernel testsummary
	$(TESTSUMMARY) -go "$(GO)" -v -- -tags e2e -count=1 -timeout 20m ./e2e

# QEMU and Debian's stock kernel for the e2e VM test of cgroup limits (this
# machine binds the memory and pids controllers to cgroup v1); best effort,
# unless OUTPOST_REQUIRE names qemu.
vm-kernel:
	@bash scripts/vm-kernel.sh .cache/vm || case ",$$(echo "$$OUTPOST_REQUIRE" | tr -d ' ')," in \
	  *,qemu,*|*,all,*) echo "vm-kernel: QEMU or the kernel is unavailable, and OUTPOST_REQUIRE requires qemu" >&2; exit 1;; \
	  *) echo "vm-kernel: QEMU or the kernel is unavailable; the VM test will skip";; \
	esac

# The soak (minutes): 100,000 commands and 10 GiB of checked output through
# a relay; OUTPOST_SOAK_COMMANDS and OUTPOST_SOAK_GIB scale it.
soak:
	$(GO) test -tags soak -run Soak -v -count=1 -timeout 60m ./hardening

# Builds, vets and compiles the test binaries for every other platform
# outpost supports (scripts/cross-check.sh; TARGETS="goos/goarch ..." for
# fewer). Not part of test: it takes minutes per target on a cold cache.
cross-check:
	bash scripts/cross-check.sh $(TARGETS)

# --- release (scripts/release.sh, scripts/go-install-check.sh; docs/install.md)
# The release archives of this commit in dist/: per target a static
# outpost_<version>_<os>_<arch>.tar.gz (.zip for windows), its SPDX SBOM
# and checksums.txt; byte-for-byte the same for the same commit. All seven
# targets take a few minutes cold; TARGETS="goos/goarch ..." for fewer.
release:
	bash scripts/release.sh $(TARGETS)

# go install github.com/outpost-exec/outpost/cmd/outpost@latest and a
# client SDK program, from a file:// proxy of this checkout with a fresh
# GOPATH, offline (about 1 to 2 minutes).
go-install-check:
	bash scripts/go-install-check.sh
# --- end release
