#!/usr/bin/env bash
# Runs every go test -fuzz target in the module for a bounded time each
# (default 20s). Crashers land in the package's testdata/fuzz/ and must be
# kept as regression seeds.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${1:-20s}"
status=0
while IFS= read -r file; do
  pkg="./$(dirname "$file")"
  for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    echo "== $pkg $target ($fuzztime)"
    if ! go test "$pkg" -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime"; then
      status=1
    fi
  done
done < <(grep -rlE '^func Fuzz' --include='*_test.go' . | sed 's|^\./||' | sort)
exit $status
