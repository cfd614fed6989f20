package conformance

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/internal/wine"
)

// The bridge where codex's users sit: outpost.exe (windows/amd64, from
// this checkout) runs `outpost bridge` under Wine, on ws:// and as the
// stdio program codex starts, to the Linux executor of the release's
// relay chain; codex (Linux here, as Wine runs no codex) is pointed at it
// and every case of the matrix must see what it sees against codex's own
// exec-server. Only the newest release gets these rows: the Windows side
// is outpost's own code, the same for every codex.

// wineBridgeRows are the Windows bridge's rows of codexCLIMatrix for
// version, through chain (its relay, executor and client token), or none
// (an older release; or Wine missing, which a subtest reports through
// testdeps).
func wineBridgeRows(t *testing.T, version, cli string, chain *peers.BridgeChain, host *executorHost) []execServer {
	if version != peers.CodexVersions[len(peers.CodexVersions)-1] {
		return nil
	}
	if err := wine.Available(); err != nil {
		t.Run("outpost-bridge-wine", func(t *testing.T) {
			testdeps.Missing(t, "wine", "skipping the Windows bridge rows: %v", err)
		})
		return nil
	}
	prefix := wine.Shared(t)
	exe := wine.Build(t, t.TempDir(), "github.com/outpost-exec/outpost/cmd/outpost")
	// The Windows client's own configuration (its key and pins).
	config := t.TempDir()
	env := append(prefix.Env(), "XDG_CONFIG_HOME="+wine.Path(config), "XDG_STATE_HOME="+wine.Path(config))
	bridge := func(listen string) []string {
		return []string{"wine", exe, "bridge", "--relay", chain.Relay.URL, "--executor", chain.ExecutorID, "--token", chain.ClientToken,
			"--listen", listen, "--log-level", "warn"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ws, err := peers.Start(ctx, env, bridge("ws://127.0.0.1:0")...)
	if err != nil {
		t.Fatal(fmt.Errorf("outpost.exe bridge under Wine: %w", err))
	}
	t.Cleanup(ws.Stop)
	return []execServer{
		{name: "outpost-bridge-wine-relay", url: ws.URL, pid: chain.Executor.Pid(), version: version, cli: cli, host: host},
		{name: "outpost-bridge-wine-stdio-relay", pid: chain.Executor.Pid(), version: version, cli: cli, host: host, stdio: bridge("stdio"), stdioEnv: env},
	}
}
