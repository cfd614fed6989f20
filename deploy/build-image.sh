#!/bin/sh
# Builds the outpost image: FROM scratch, holding the static outpost binary,
# the outpost-sandbox helper beside it, and busybox-static (a shell and
# coreutils for the commands executors run, and for the compose stack's
# init script). Nothing is pulled from a registry.
#
#   deploy/build-image.sh [TAG]      TAG defaults to $OUTPOST_IMAGE, else outpost:local
#
# Needs Go, Docker and busybox-static (apt-get install busybox-static). Run
# it from anywhere inside the checkout.
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
tag=${1:-${OUTPOST_IMAGE:-outpost:local}}

busybox=$(command -v busybox || true)
if [ -z "$busybox" ]; then
	echo "build-image: busybox is not installed (apt-get install busybox-static)" >&2
	exit 1
fi
# A dynamically linked busybox would find no libc in a scratch image.
if ! "$busybox" --list >/dev/null 2>&1 || file -L "$busybox" 2>/dev/null | grep -q 'dynamically linked'; then
	echo "build-image: $busybox is not the static build (apt-get install busybox-static)" >&2
	exit 1
fi

ctx=$(mktemp -d "${TMPDIR:-/tmp}/outpost-image.XXXXXX")
trap 'rm -rf "$ctx"' EXIT INT TERM
rootfs=$ctx/rootfs
mkdir -p "$rootfs/usr/bin" "$rootfs/bin" "$rootfs/tmp" "$rootfs/state"
chmod 1777 "$rootfs/tmp" # a real /tmp, which commands expect

# Static (no cgo): the image has no libc. The helper beside outpost is the
# one a sandboxed start uses (faster than re-executing outpost).
(cd "$root" && CGO_ENABLED=0 go build -o "$rootfs/usr/bin/outpost" ./cmd/outpost)
(cd "$root" && CGO_ENABLED=0 go build -o "$rootfs/usr/bin/outpost-sandbox" ./cmd/outpost-sandbox)

cp "$busybox" "$rootfs/bin/busybox"
chmod 0755 "$rootfs/bin/busybox"
for applet in $("$busybox" --list); do
	[ -e "$rootfs/bin/$applet" ] || ln -s busybox "$rootfs/bin/$applet"
done

# The compose stack's bootstrap and executor start scripts (deploy/compose/).
mkdir -p "$rootfs/usr/libexec/outpost"
cp "$here/compose/bootstrap.sh" "$here/compose/executor.sh" "$rootfs/usr/libexec/outpost/"
chmod 0755 "$rootfs/usr/libexec/outpost/"*.sh

cp "$here/Dockerfile" "$ctx/Dockerfile"
docker build -q -t "$tag" "$ctx" >/dev/null
echo "$tag"
