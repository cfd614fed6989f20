#!/usr/bin/env bash
# cross-check.sh — does outpost build for every platform it supports?
#
# For each target (GOOS/GOARCH), with CGO_ENABLED=0 (outpost's releases are
# static, and a cross-compiling machine has no C toolchain for them):
#   build  go build ./...
#   vet    go vet ./...
#   test   go test -c -o /dev/null for every package with tests (the test
#          binaries are compiled and linked, then discarded), and ./e2e
#          under its e2e build tag
# and at the end a summary: per target, each step's result and the packages
# that failed it. Exit status 1 if any step of any target failed.
#
# Usage: scripts/cross-check.sh [GOOS/GOARCH ...]   (default: all targets;
#        TARGETS="a/b c/d" works too). Logs: $CROSS_CHECK_LOGS, default
#        .cache/cross-check/, one file per target and step.
#
# Runtime: the targets run one after another, each step with go's own
# package parallelism (-p, GOMAXPROCS: 2 on the project's machines), since
# running targets side by side on 2 cores only adds contention. A cold cache
# costs a few minutes per target (the standard library and every dependency
# compiled for it); with a warm cache the linking of ~35 test binaries per
# target dominates, so they are linked without symbol tables or DWARF
# (-ldflags=-s -w, discarded anyway). The script prints each step's time and
# the total.
set -uo pipefail

cd "$(dirname "$0")/.." || exit 2
GO=${GO:-go}
ALL_TARGETS="darwin/arm64 darwin/amd64 windows/amd64 windows/arm64 linux/arm64 freebsd/amd64"
if [ $# -gt 0 ]; then
	targets="$*"
else
	targets=${TARGETS:-$ALL_TARGETS}
fi
logs=${CROSS_CHECK_LOGS:-.cache/cross-check}
mkdir -p "$logs"

export CGO_ENABLED=0
start_all=$SECONDS
summary=()
failed=0

# failing_packages LOG: the import paths go named as failing in LOG — "#
# pkg" headers of compile and vet errors, "FAIL pkg [build failed]" and
# "[setup failed]" lines of go test, and "package pkg: ..." load errors.
failing_packages() {
	{
		sed -nE 's/^# \[?([^] ]+).*/\1/p' "$1"
		sed -nE 's/^FAIL[[:space:]]+([^ ]+)[[:space:]]+\[(build|setup) failed\].*/\1/p' "$1"
		sed -nE 's/^package ([^ :]+).*/\1/p' "$1"
	} | sed -E 's#^github\.com/outpost-exec/outpost/?#./#' | sort -u | tr '\n' ' '
}

# step NAME CMD...: runs CMD with its output in the target's log, and
# records the result and time.
step() {
	local name=$1
	shift
	local log="$logs/${goos}_${goarch}.$name.log"
	local t0=$SECONDS
	if "$@" >"$log" 2>&1; then
		line+=$(printf ' %s ok (%ds)' "$name" $((SECONDS - t0)))
	else
		local pk
		pk=$(failing_packages "$log")
		line+=$(printf ' %s FAILED (%ds: %s)' "$name" $((SECONDS - t0)) "${pk:-see $log}")
		target_failed=1
	fi
}

for t in $targets; do
	goos=${t%/*}
	goarch=${t#*/}
	export GOOS=$goos GOARCH=$goarch
	echo "== $t" >&2
	t0=$SECONDS
	line=""
	target_failed=0
	step build "$GO" build ./...
	step vet "$GO" vet ./...
	# Packages with tests, for this target (build constraints differ).
	pkgs=$("$GO" list -e -f '{{if or .TestGoFiles .XTestGoFiles}}{{.ImportPath}}{{end}}' ./... 2>"$logs/${goos}_${goarch}.list.log")
	# shellcheck disable=SC2086 # one word per package
	step test "$GO" test -c -o /dev/null -ldflags='-s -w' $pkgs
	step e2e "$GO" test -c -o /dev/null -ldflags='-s -w' -tags e2e ./e2e
	status=PASS
	if [ $target_failed -ne 0 ]; then
		status=FAIL
		failed=1
	fi
	summary+=("$(printf '%-14s %s %4ds:%s' "$t" "$status" $((SECONDS - t0)) "$line")")
	echo "${summary[-1]}" >&2
done
unset GOOS GOARCH

echo
echo "cross-check summary (CGO_ENABLED=0; logs in $logs/):"
printf '  %s\n' "${summary[@]}"
echo "total: $((SECONDS - start_all))s"
exit $failed
