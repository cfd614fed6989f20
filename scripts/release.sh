#!/usr/bin/env bash
# release.sh — the release archives of this commit (make release).
#
# For each target GOOS/GOARCH, in $DIST (default dist/):
#   outpost_<version>_<os>_<arch>.tar.gz   (.zip for windows) holding
#       outpost (outpost.exe), on linux also outpost-sandbox (the sandbox
#       helper an executor picks up beside it), README.md, LICENSE if any;
#       files at the archive's root, GoReleaser's default layout and names
#   outpost_<version>_<os>_<arch>.<ext>.sbom.json   SPDX 2.3 SBOM of it
#   checksums.txt   SHA-256 of every archive and SBOM (sha256sum -c)
#
# The version: $VERSION if set, else `git describe --tags --dirty` without
# its leading "v" (1.2.0, 1.2.0-3-gabc1234), else, with no tag,
# 0.0.0-<commit time yyyymmddhhmmss UTC>-<12-digit commit> (the Go
# pseudo-version's form); "-dirty" when tracked files are modified. It and
# the full commit are stamped with -X main.version / -X main.commit (by
# hand: GOFLAGS may turn VCS stamping off, and a release must not depend on
# it). Binaries are static (CGO_ENABLED=0), -trimpath, -s -w, at the
# baseline GOAMD64=v1 / GOARM64=v8.0, with GOFLAGS cleared.
#
# Deterministic: archives, SBOMs and checksums depend only on the commit
# (file times are the commit time) and the Go release — building the same
# clean commit twice gives the same bytes. The archiving, SBOM and
# checksums are a Go helper's (internal/release), not tar/zip/sha256sum,
# whose output differs between implementations; so this needs only git
# and go.
#
# Usage: scripts/release.sh [GOOS/GOARCH ...]  (default: the seven release
#        targets; TARGETS="a/b c/d" works too; DIST=dir for another output
#        directory). About half a minute per target on 2 cores with a warm
#        build cache, a few minutes per target cold.
set -euo pipefail

cd "$(dirname "$0")/.."
GO=${GO:-go}
ALL_TARGETS="linux/amd64 linux/arm64 darwin/amd64 darwin/arm64 windows/amd64 windows/arm64 freebsd/amd64"
if [ $# -gt 0 ]; then
	targets="$*"
else
	targets=${TARGETS:-$ALL_TARGETS}
fi
dist=${DIST:-dist}
start=$SECONDS

commit=$(git rev-parse HEAD)
epoch=$(git log -1 --format=%ct HEAD)
dirty=""
git diff --quiet HEAD -- 2>/dev/null || dirty="-dirty"
tag=""
if [ -n "${VERSION:-}" ]; then
	version=${VERSION#v}
elif described=$(git describe --tags --dirty 2>/dev/null); then
	version=${described#v}
	tag=$(git describe --tags --exact-match 2>/dev/null || true)
	[ -n "$dirty" ] && tag=""
else
	version="0.0.0-$(TZ=UTC git log -1 --format=%cd --date=format-local:%Y%m%d%H%M%S HEAD)-${commit:0:12}$dirty"
fi
case $version in
*/* | *" "* | "") echo "release: unusable version \"$version\"" >&2; exit 2 ;;
esac
echo "release: outpost $version (commit $commit${dirty:+, modified work tree}), targets: $targets" >&2

mkdir -p "$dist"
rm -f "$dist"/outpost_* "$dist"/checksums.txt
work="$dist/.build"
rm -rf "$work"
mkdir -p "$work"
trap 'rm -rf "$work"' EXIT

tool="$work/outpost-release"
GOOS= GOARCH= GOFLAGS= CGO_ENABLED=0 "$GO" build -o "$tool" ./internal/release/cmd/outpost-release

extra=()
for f in README.md LICENSE; do
	[ -f "$f" ] && extra+=("$f=$f")
done

outputs=()
for t in $targets; do
	goos=${t%/*}
	goarch=${t#*/}
	t0=$SECONDS
	bin="$work/${goos}_$goarch"
	mkdir -p "$bin"
	exe=""
	ext="tar.gz"
	if [ "$goos" = windows ]; then
		exe=".exe"
		ext="zip"
	fi
	cmds=(outpost)
	[ "$goos" = linux ] && cmds+=(outpost-sandbox)
	binaries=()
	for c in "${cmds[@]}"; do
		GOOS=$goos GOARCH=$goarch GOAMD64=v1 GOARM64=v8.0 GOEXPERIMENT= GOFLAGS= CGO_ENABLED=0 \
			"$GO" build -trimpath -buildvcs=false -mod=readonly \
			-ldflags "-s -w -X main.version=$version -X main.commit=$commit" \
			-o "$bin/$c$exe" "./cmd/$c"
		binaries+=("$c$exe=$bin/$c$exe")
	done
	archive="$dist/outpost_${version}_${goos}_$goarch.$ext"
	"$tool" archive -o "$archive" -mtime "$epoch" "${binaries[@]}" "${extra[@]}"
	url=""
	[ -n "$tag" ] && url="https://github.com/outpost-exec/outpost/releases/download/$tag/$(basename "$archive")"
	"$tool" sbom -archive "$archive" -version "$version" -commit "$commit" -created "$epoch" -url "$url" \
		"${binaries[@]}" >"$archive.sbom.json"
	outputs+=("$archive" "$archive.sbom.json")
	echo "release: $t: $(basename "$archive") ($((SECONDS - t0))s)" >&2
done

"$tool" checksums "${outputs[@]}" >"$dist/checksums.txt"
echo "release: ${#outputs[@]} files and checksums.txt in $dist/ ($((SECONDS - start))s)" >&2
