package client

import (
	"context"
	"path/filepath"
	"sync"
	"testing"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/relay"
)

// pinLog records Config.OnPin's calls.
type pinLog struct {
	mu    sync.Mutex
	calls []pinCall
}

type pinCall struct {
	addr string
	key  identity.PublicKey
	file string
}

func (l *pinLog) onPin(addr string, key identity.PublicKey, file string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, pinCall{addr, key, file})
}

func (l *pinLog) get() []pinCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pinCall(nil), l.calls...)
}

func TestOnPinReportsEachNewDirectPin(t *testing.T) {
	ex := startExecutor(t, nil)
	known := filepath.Join(t.TempDir(), "known_executors")
	var log pinLog
	cfg := Config{KnownExecutors: known, OnPin: log.onPin}
	addr := ex.ln.URL() // no fingerprint: trust on first use (Noise XX)
	env := dial(t, addr, cfg)
	want := []pinCall{{addr, ex.key.PublicKey(), known}}
	if got := log.get(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("first contact: OnPin calls %+v, want %+v", got, want)
	}
	// A reconnect finds the pin (IK): nothing new.
	env.dropConnection()
	if out, err := Command(env, "echo", "again").Output(); err != nil || string(out) != "again\n" {
		t.Fatalf("after the reconnect: %q %v", out, err)
	}
	env.Close()
	// Later contacts, and keys pinned by the URL, are not reported.
	dial(t, addr, cfg).Close()
	dial(t, ex.url, Config{KnownExecutors: filepath.Join(t.TempDir(), "k"), OnPin: log.onPin}).Close()
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnPin calls %+v, want only the first contact's", got)
	}
}

func TestOnPinReportsAPinThroughTheRelay(t *testing.T) {
	tokens, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	relayKey, exKey := newKey(t), newKey(t)
	rs, err := relay.NewServer(relay.Config{Key: relayKey.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := rs.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	relayURL := "outpost://" + ln.Addr().String() + "#" + relayKey.PublicKey().Fingerprint()
	joinToken, _, err := tokens.Create(relay.TokenJoin, relay.CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	clientToken, _, err := tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: "build-*"})
	if err != nil {
		t.Fatal(err)
	}

	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	joined, done := make(chan struct{}, 16), make(chan error, 1)
	go func() {
		done <- srv.Join(ctx, executor.JoinConfig{RelayURL: relayURL, Key: exKey.Keypair(), ID: "build-1", Token: joinToken,
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

	known := filepath.Join(t.TempDir(), "known_executors")
	var log pinLog
	cfg := Config{Executor: "build-1", Token: clientToken, KnownExecutors: known, OnPin: log.onPin}
	env := dial(t, relayURL, cfg)
	want := pinCall{"outpost://" + ln.Addr().String() + "/build-1", exKey.PublicKey(), known}
	if got := log.get(); len(got) != 1 || got[0] != want {
		t.Fatalf("first contact: OnPin calls %+v, want %+v", got, want)
	}
	if out, err := Command(env, "echo", "via relay").Output(); err != nil || string(out) != "via relay\n" {
		t.Fatalf("%q %v", out, err)
	}
	env.Close()
	dial(t, relayURL, cfg).Close()
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnPin calls %+v, want only the first contact's", got)
	}
}
