#!/bin/sh
# The compose stack's one-shot bootstrap (service "bootstrap"; see
# deploy/README.md). It runs before the relay at every `docker-compose up`
# and changes nothing that exists, so re-running it is harmless:
#
#   /relay                 the relay's state volume: `outpost relay init`
#                          makes its key and token database if missing, so the
#                          fingerprint is known before the relay first starts.
#   /executors/ID          each executor's state volume: the relay's URL
#                          (rewritten every run) and, if it has none yet, a
#                          one-use join token. Once the executor has joined,
#                          its id is bound to its key and it needs no token
#                          again (the used-up token left behind is worthless).
#   /config/outpost        the client's config volume: "relay =" and a client
#                          token, for `docker-compose run --rm client exec ...`.
#
# Tokens are written to files (mode 0600) and never printed.
set -eu
umask 077

advertise=${OUTPOST_ADVERTISE:-relay:7443}
url=$(outpost relay init --state-dir /relay --advertise "$advertise")

# write FILE CONTENT: atomically, so a reader never sees half a file.
write() {
	printf '%s\n' "$2" >"$1.tmp"
	mv -f "$1.tmp" "$1"
}

for dir in /executors/*/; do
	[ -d "$dir" ] || continue
	id=$(basename "$dir")
	write "$dir/relay-url" "$url"
	if [ ! -s "$dir/join-token" ]; then
		tok=$(outpost token create --join --uses 1 --ttl "${OUTPOST_JOIN_TTL:-168h}" --state-dir /relay 2>/dev/null)
		write "$dir/join-token" "$tok"
		echo "bootstrap: minted a one-use join token for executor $id"
	fi
done

if [ -d /config/outpost ]; then
	cfg=/config/outpost/config
	tok=
	[ -s "$cfg" ] && tok=$(sed -n 's/^token *= *//p' "$cfg")
	if [ -z "$tok" ]; then
		tok=$(outpost token create --client --executors "${OUTPOST_CLIENT_EXECUTORS:-*}" --state-dir /relay 2>/dev/null)
		echo "bootstrap: minted a client token for the client service"
	fi
	write "$cfg" "relay = $url
token = $tok"
fi

echo "bootstrap: relay $url"
