#!/usr/bin/env bash
# Side-by-side benchmarks on this machine, in one run: outpost's
# exec-server and the real codex 0.145.0 exec-server (installed here with
# npm if missing) over their WebSocket listeners, against a local
# fork/exec and a local pipe (the limits).
set -euo pipefail
cd "$(dirname "$0")/.."
if ! codex=$(bash scripts/install-codex.sh); then
  echo "bench: codex could not be installed; its rows will be skipped" >&2
else
  export OUTPOST_CODEX_BIN="$codex"
fi
if ! command -v bwrap >/dev/null; then
  (apt-get install -y bubblewrap >/dev/null 2>&1 || (apt-get update >/dev/null 2>&1 && apt-get install -y bubblewrap >/dev/null 2>&1)) ||
    echo "bench: bubblewrap could not be installed; its row will be skipped" >&2
fi
go test ./bench -run '^$' -bench 'StartToExit' -benchtime "${LATENCY_RUNS:-500}x" -count 1
go test ./bench -run '^$' -bench 'Throughput' -benchtime "${THROUGHPUT_RUNS:-3}x" -count 1
go test ./bench -run '^$' -bench 'Connect' -benchtime "${CONNECT_RUNS:-200}x" -count 1
go test ./bench -run '^$' -bench 'Concurrent1000' -benchtime 1x -count 1
go test ./bench -run '^$' -bench 'SandboxOverhead' -benchtime "${SANDBOX_RUNS:-300}x" -count 1
go test ./bench -run '^$' -bench 'RelayConnectToFirstOutput' -benchtime "${CONNECT_RUNS:-200}x" -count 1
go test ./bench -run '^$' -bench 'RelayIdleExecutors' -benchtime 1x -count 1
