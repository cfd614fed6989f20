package main

import (
	"flag"

	"github.com/outpost-exec/outpost/transport"
)

// wsAuthFlags are codex 0.171's capability-token flags, on every codex
// WebSocket front end (executor serve --listen ws://, bridge): a codex
// client sends the token as its environments.toml auth_bearer_token.
type wsAuthFlags struct {
	mode, file, digest *string
}

func addWSAuthFlags(fs *flag.FlagSet) wsAuthFlags {
	f := wsAuthFlags{
		mode:   fs.String("ws-auth", "", "capability-token: require a bearer token on the WebSocket (as codex's exec-server); without it $OUTPOST_CONNECTION_TOKEN, if set, is the token"),
		file:   fs.String("ws-token-file", "", "with --ws-auth capability-token: absolute path of a file (mode 0600) holding the token"),
		digest: fs.String("ws-token-sha256", "", "with --ws-auth capability-token: hex SHA-256 of the token, so this process never holds it"),
	}
	flagChoices(fs, "ws-auth", "capability-token")
	return f
}

// resolve builds the check: the flags, else $OUTPOST_CONNECTION_TOKEN (or
// $CODEX_EXEC_SERVER_CONNECTION_TOKEN).
func (f wsAuthFlags) resolve() (transport.WSAuth, error) {
	env := ""
	if *f.mode == "" {
		tok, err := connectionToken()
		if err != nil {
			return transport.WSAuth{}, err
		}
		env = tok
	}
	return transport.LoadWSAuth(*f.mode, *f.file, *f.digest, env)
}
