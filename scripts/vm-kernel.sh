#!/usr/bin/env bash
# Fetches what the e2e VM test needs: QEMU (Debian's qemu-system-x86,
# without recommends) and Debian's stock kernel, whose cgroup v2 has the
# memory and pids controllers that this machine binds to cgroup v1. The
# kernel package is downloaded, not installed: only its vmlinuz is kept,
# in DEST (default .cache/vm). Best effort: the test skips, saying what is
# missing, if this fails.
set -euo pipefail
dest="${1:-.cache/vm}"
mkdir -p "$dest"
dest="$(cd "$dest" && pwd)"
if ! command -v qemu-system-x86_64 >/dev/null; then
  timeout 600 apt-get update -qq
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq --no-install-recommends qemu-system-x86 >/dev/null
fi
if ! command -v busybox >/dev/null; then
  DEBIAN_FRONTEND=noninteractive timeout 600 apt-get install -y -qq busybox-static >/dev/null
fi
if [ -s "$dest/vmlinuz" ]; then
  exit 0
fi
pkg="$(apt-cache depends linux-image-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
if [ -z "$pkg" ]; then
  timeout 600 apt-get update -qq
  pkg="$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-/ {print $2; exit}')"
fi
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
chmod 777 "$work" # apt's download user writes here
(cd "$work" && timeout 600 apt-get download -qq "$pkg" 2>/dev/null)
dpkg-deb --fsys-tarfile "$work"/"$pkg"_*.deb | tar -x -C "$work" --wildcards './boot/vmlinuz-*'
cp "$work"/boot/vmlinuz-* "$dest/vmlinuz.tmp"
mv "$dest/vmlinuz.tmp" "$dest/vmlinuz"
echo "vm kernel: $pkg -> $dest/vmlinuz"
