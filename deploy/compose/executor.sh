#!/bin/sh
# Starts `outpost executor join` in the compose stack from what the
# bootstrap service left in the executor's state volume (/state): the
# relay's URL and, until the executor's key is bound, its join token.
# Extra arguments (the service's `command:`) are passed on.
set -eu
state=/state
if [ ! -s "$state/relay-url" ]; then
	echo "executor: $state/relay-url is missing: mount this executor's state volume on the bootstrap service as /executors/ID and run it" >&2
	exit 1
fi
# Through the environment, not argv: argv is visible to every process
# that can list this one.
if [ -s "$state/join-token" ]; then
	OUTPOST_JOIN_TOKEN=$(cat "$state/join-token")
	export OUTPOST_JOIN_TOKEN
fi
exec outpost executor join --relay "$(cat "$state/relay-url")" --id "${OUTPOST_EXECUTOR_ID:?set OUTPOST_EXECUTOR_ID to the executor id}" --state-dir "$state" "$@"
