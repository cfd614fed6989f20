#!/usr/bin/env bash
# Installs the official MCP Inspector CLI (npm
# @modelcontextprotocol/inspector-cli@VERSION) into .bench/mcp-inspector,
# for cmd/outpost's outpost mcp tests, and prints the path of its cli.js.
# Idempotent; exits non-zero if npm cannot fetch it.
set -euo pipefail
cd "$(dirname "$0")/.."
version="${OUTPOST_MCP_INSPECTOR_VERSION:-1.0.3}"
prefix=".bench/mcp-inspector"
pkg="$prefix/node_modules/@modelcontextprotocol/inspector-cli"
cli="$pkg/build/cli.js"
if ! command -v npm >/dev/null || ! command -v node >/dev/null; then
  echo "install-mcp-inspector: npm or node not found" >&2
  exit 1
fi
installed() {
  [ -f "$cli" ] && [ "$(node -p "require('./$pkg/package.json').version" 2>/dev/null)" = "$version" ]
}
if ! installed; then
  mkdir -p "$prefix"
  npm install --silent --no-audit --no-fund --prefix "$prefix" "@modelcontextprotocol/inspector-cli@${version}" >&2
fi
installed || { echo "install-mcp-inspector: inspector-cli $version not found after install" >&2; exit 1; }
echo "$PWD/$cli"
