#!/usr/bin/env bash
# Installs the real codex exec-server (npm @openai/codex@0.145.0-linux-x64)
# into .bench/codex, for the differential tests and the benchmarks, and
# prints the binary's path. Idempotent; exits non-zero if npm cannot fetch it.
set -euo pipefail
cd "$(dirname "$0")/.."
version="0.145.0"
prefix=".bench/codex"
bin="$prefix/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$version"; then
  echo "$PWD/$bin"
  exit 0
fi
if ! command -v npm >/dev/null; then
  echo "install-codex: npm not found" >&2
  exit 1
fi
mkdir -p "$prefix"
npm install --silent --no-audit --no-fund --prefix "$prefix" "@openai/codex@${version}-linux-x64" >&2
if [ ! -x "$bin" ]; then
  bin=$(find "$prefix/node_modules" -type f -name codex -path '*bin*' -perm -u+x | head -n1)
fi
[ -x "$bin" ] || { echo "install-codex: codex binary not found after install" >&2; exit 1; }
echo "$PWD/$bin"
