package client

import (
	"context"
	"path/filepath"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/relay"
)

// joinedRelay runs a relay in this process and an executor joined to it
// as id; it returns the relay's URL, its address, a client token for
// executors matching glob, and the executor's key.
func joinedRelay(t *testing.T, id, glob string) (relayURL, addr, clientToken string, exKey identity.Key) {
	t.Helper()
	tokens, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	relayKey := newKey(t)
	exKey = newKey(t)
	rs, err := relay.NewServer(relay.Config{Key: relayKey.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := rs.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	addr = ln.Addr().String()
	relayURL = "outpost://" + addr + "#" + relayKey.PublicKey().Fingerprint()
	joinToken, _, err := tokens.Create(relay.TokenJoin, relay.CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	if clientToken, _, err = tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: glob}); err != nil {
		t.Fatal(err)
	}
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	joined, done := make(chan struct{}, 16), make(chan error, 1)
	go func() {
		done <- srv.Join(ctx, executor.JoinConfig{RelayURL: relayURL, Key: exKey.Keypair(), ID: id, Token: joinToken,
			Joined: func() { joined <- struct{}{} }})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		srv.Shutdown(context.Background())
	})
	select {
	case <-joined:
	case err := <-done:
		t.Fatalf("join ended: %v", err)
	case <-ctxT(t).Done():
		t.Fatal("the executor did not join")
	}
	return relayURL, addr, clientToken, exKey
}
