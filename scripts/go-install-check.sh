#!/usr/bin/env bash
# go-install-check.sh — does `go install github.com/outpost-exec/outpost/cmd/outpost@latest`
# work for a user, and can a program of theirs use the client SDK? Offline,
# and before anything is published.
#
# 1. This checkout (the files `git ls-files` lists, as they are in the work
#    tree; or the commit $GO_INSTALL_CHECK_REV) becomes a module version in a file:// module proxy
#    (internal/release: the zip follows the go command's module zip rules):
#    the tag at HEAD if any, else the pseudo-version
#    v0.0.0-<commit time>-<12-digit commit>, which go resolves as @latest.
# 2. As a user with a fresh Go setup — a new GOPATH and module cache, no
#    go env file, GOFLAGS empty, outside any module — `go install …@latest`
#    through GOPROXY=file://<proxy>,file://<host module cache>/cache/download
#    (the second serves the dependencies: no network, and go.sum checks
#    them), then runs the installed outpost: --version must name the
#    version, and `outpost demo` (a relay, an executor and a client in one
#    process) must succeed.
# 3. A new module that imports github.com/outpost-exec/outpost/client:
#    go get @latest and go mod tidy through the same proxy, then go build for darwin/arm64 and
#    windows/amd64, and for this machine, where it runs.
#
# The build cache is the host's (it is keyed by content, so this proves
# nothing less), and the work directory is the same path each run
# ($GO_INSTALL_CHECK_DIR, default $TMPDIR/outpost-go-install-check, emptied
# first), so a second run finds its compiled packages: about 1 to 2 minutes
# cold on 2 cores, well under a minute warm. It prints each step and its
# time, and exits non-zero at the first failure (keeping the directory).
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
start=$SECONDS
step() { echo "go-install-check: $* ($((SECONDS - start))s)" >&2; }

w=${GO_INSTALL_CHECK_DIR:-${TMPDIR:-/tmp}/outpost-go-install-check}
if [ -e "$w" ]; then
	chmod -R u+w "$w" # the module cache is read-only
	rm -rf "$w"
fi
mkdir -p "$w/outside" "$w/sdk"

hostdl="$("$GO" env GOMODCACHE)/cache/download"
gocache=$("$GO" env GOCACHE)
GOFLAGS= CGO_ENABLED=0 "$GO" build -o "$w/outpost-release" ./internal/release/cmd/outpost-release

commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
if ! version=$(git describe --tags --exact-match HEAD 2>/dev/null); then
	version="v0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)-${commit:0:12}"
fi
# GO_INSTALL_CHECK_REV=<rev>: serve that commit (git archive) instead of
# the work tree, e.g. HEAD while the work tree holds unfinished edits.
src=.
if [ -n "${GO_INSTALL_CHECK_REV:-}" ]; then
	src="$w/src"
	mkdir -p "$src"
	git archive --format=tar "$GO_INSTALL_CHECK_REV" | tar -x -C "$src"
	git ls-tree -r -z --name-only "$GO_INSTALL_CHECK_REV" |
		"$w/outpost-release" modproxy -dir "$src" -proxy "$w/proxy" -version "$version" -time "$epoch"
else
	git ls-files -z | "$w/outpost-release" modproxy -dir . -proxy "$w/proxy" -version "$version" -time "$epoch"
fi
gosum="$(cd "$src" && pwd)/go.sum"
step "proxy file://$w/proxy serves github.com/outpost-exec/outpost@$version"

# The user's environment: nothing of this machine's Go configuration but
# the toolchain choice and the build cache.
export GOPATH="$w/gopath" GOMODCACHE="$w/gopath/pkg/mod" GOCACHE="$gocache"
# Offline there is no checksum database: go would ask sum.golang.org for
# every dependency (the module's own go.sum does not count for go install
# pkg@version). So GOSUMDB is off, and instead every dependency module the
# installed binary records (with the h1: hash go computed of what it
# unpacked) must be in the module's go.sum, as sum.golang.org would have
# made sure.
export GOPROXY="file://$w/proxy,file://$hostdl" GONOSUMDB=github.com/outpost-exec GOSUMDB=off
export GOFLAGS= GOENV="$w/no-go-env" GOWORK=off
unset GOBIN GOOS GOARCH GOPRIVATE GONOPROXY GOINSECURE CGO_ENABLED GOEXPERIMENT

cd "$w/outside"
"$GO" install github.com/outpost-exec/outpost/cmd/outpost@latest
step "go install github.com/outpost-exec/outpost/cmd/outpost@latest: $GOPATH/bin/outpost"

"$GO" version -m "$GOPATH/bin/outpost" | awk '$1 == "dep" || $1 == "=>" { print $2, $3, $4 }' >"$w/deps.txt"
missing=$(grep -vxFf <(awk '{ print $1, $2, $3 }' "$gosum") "$w/deps.txt" || true)
if [ -n "$missing" ] || [ ! -s "$w/deps.txt" ]; then
	echo "go-install-check: dependencies of the installed outpost not as go.sum has them:" >&2
	echo "${missing:-(none recorded)}" >&2
	exit 1
fi
step "the installed outpost's $(wc -l <"$w/deps.txt") dependency modules match go.sum"

got=$("$GOPATH/bin/outpost" --version)
case $got in
*"$version"*) step "outpost --version: $got" ;;
*)
	echo "go-install-check: outpost --version printed \"$got\", not naming $version" >&2
	exit 1
	;;
esac
if ! "$GOPATH/bin/outpost" demo >"$w/demo.log" 2>&1; then
	echo "go-install-check: outpost demo failed:" >&2
	cat "$w/demo.log" >&2
	exit 1
fi
step "outpost demo: $(tail -n 1 "$w/demo.log")"

cd "$w/sdk"
cat >main.go <<'GO'
// A user's program of the client SDK: it must resolve, tidy and build for
// every platform outpost supports.
package main

import (
	"fmt"

	"github.com/outpost-exec/outpost/client"
)

func main() {
	cfg := client.DefaultConfig()
	fmt.Println("client", cfg.ClientName)
}
GO
"$GO" mod init example.com/outpost-sdk-check >/dev/null 2>&1
# go get resolves the import through the proxy (@latest, as a user's go
# mod tidy would); tidy -e then trims go.mod and go.sum: offline it cannot
# fetch the test-only dependencies of dependencies it also records (the host
# cache never needed them), and without -e it stops at those. The builds
# below need everything else.
"$GO" get github.com/outpost-exec/outpost/client@latest
"$GO" mod tidy -e 2>"$w/tidy.log" || { cat "$w/tidy.log" >&2; exit 1; }
grep -q "github.com/outpost-exec/outpost $version" go.mod || {
	echo "go-install-check: go mod tidy did not require github.com/outpost-exec/outpost $version:" >&2
	cat go.mod >&2
	exit 1
}
step "SDK: go get and go mod tidy required github.com/outpost-exec/outpost $version"
host="$("$GO" env GOHOSTOS)/$("$GO" env GOHOSTARCH)"
for t in darwin/arm64 windows/amd64 "$host"; do
	# -buildvcs=false: the work directory may lie inside some unrelated
	# repository (a stray /tmp/.git), which is not the user's program's.
	GOOS=${t%/*} GOARCH=${t#*/} "$GO" build -buildvcs=false -o "$w/sdk-${t%/*}-${t#*/}" .
	step "SDK: go build for $t"
done
out=$("$w/sdk-${host%/*}-${host#*/}")
[ "$out" = "client outpost" ] || {
	echo "go-install-check: the SDK program printed \"$out\"" >&2
	exit 1
}

cd /
chmod -R u+w "$w"
rm -rf "$w"
step "passed"
