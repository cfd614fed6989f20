#!/usr/bin/env bash
# Installs the real codex CLI and exec-server (npm @openai/codex@VERSION-linux-x64)
# of every release the tests run (internal/peers.CodexVersions) into
# .bench/codex-VERSION, and prints each binary's path. Idempotent; exits
# non-zero if npm cannot fetch one.
set -euo pipefail
cd "$(dirname "$0")/.."
versions="${OUTPOST_CODEX_VERSIONS:-0.145.0 0.158.0 0.171.0}"
if ! command -v npm >/dev/null; then
  echo "install-codex: npm not found" >&2
  exit 1
fi
for version in $versions; do
  prefix=".bench/codex-$version"
  bin="$prefix/node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex"
  if ! { [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "$version"; }; then
    mkdir -p "$prefix"
    npm install --silent --no-audit --no-fund --prefix "$prefix" "@openai/codex@${version}-linux-x64" >&2
  fi
  [ -x "$bin" ] || { echo "install-codex: codex $version not found after install" >&2; exit 1; }
  echo "$PWD/$bin"
done
