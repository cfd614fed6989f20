package relay

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

// startRelayWith starts a relay with cfg's limits.
func startRelayWith(t *testing.T, cfg Config) *testRelay {
	t.Helper()
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	k := key(t)
	cfg.Key, cfg.Tokens, cfg.Logger = k.Keypair(), tokens, zaptest.NewLogger(t)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &testRelay{srv: srv, ln: ln, key: k, tokens: tokens, addr: ln.Addr().String()}
}

// rawCall sends one control request to the relay and returns its error
// reply (nil for a result).
func rawCall(t *testing.T, r *testRelay, method string, params any) *protocol.Error {
	t.Helper()
	ctx := ctxT(t)
	rc, err := relayclient.Dial(ctx, r.url(), key(t).Keypair(), relayclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	err = rc.Call(ctx, method, params, nil)
	if refusal := (*protocol.Error)(nil); errors.As(err, &refusal) {
		return refusal
	}
	if err != nil {
		t.Fatal(err)
	}
	return nil
}

func wantKind(t *testing.T, what string, err error, code int, kind protocol.Kind) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != code || pe.Kind() != kind {
		t.Errorf("%s: %v (kind %q), want code %d kind %s", what, err, protocol.KindOf(err), code, kind)
	}
}

// Every refusal of the relay says what it means: refused (credentials),
// exhausted (a limit), unavailable (offline, shutting down), invalid,
// unsupported — the code alone cannot, as most are -32600.
func TestRelayRefusalsCarryTheirKinds(t *testing.T) {
	r := startRelayWith(t, Config{MaxExecutors: 1, MaxStreamsPerExecutor: 1})
	e := join(t, r, "web-1", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	clientTok := r.token(t, TokenClient, CreateOptions{Executors: "web-*"})

	// relay/join
	wantKind(t, "join of a full relay", rawCall(t, r, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "web-2", Token: r.token(t, TokenJoin, CreateOptions{})}), protocol.CodeInvalidRequest, protocol.KindExhausted)
	wantKind(t, "join without a token", rawCall(t, r, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "web-3"}), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "join with a bogus token", rawCall(t, r, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "web-3", Token: "opt_bogus"}), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "join of an id bound to another key", rawCall(t, r, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "web-1", Token: r.token(t, TokenJoin, CreateOptions{})}), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "join with a bad id", rawCall(t, r, protocol.MethodRelayJoin, protocol.RelayJoinParams{ExecutorID: "a b"}), protocol.CodeInvalidParams, protocol.KindInvalid)
	wantKind(t, "unknown method", rawCall(t, r, "relay/teleport", protocol.Empty{}), protocol.CodeMethodNotFound, protocol.KindUnsupported)

	// relay/connect, through the client as a user sees it
	dialErr := func(id, token string) error {
		_, err := dialVia(t, r, id, token, client.Config{NoResume: true})
		return err
	}
	wantKind(t, "connect to an executor never joined", dialErr("web-9", clientTok), protocol.CodeNotFound, protocol.KindNotFound)
	if err := r.tokens.BindExecutor("web-8", key(t).PublicKey()); err != nil {
		t.Fatal(err)
	}
	wantKind(t, "connect to an offline executor", dialErr("web-8", clientTok), protocol.CodeNotFound, protocol.KindUnavailable)
	wantKind(t, "connect outside the token's ACL", dialErr("db-1", r.token(t, TokenClient, CreateOptions{Executors: "web-*"})), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "connect with a bogus token", dialErr("web-1", "opt_bogus"), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "connect with a join token", dialErr("web-1", r.token(t, TokenJoin, CreateOptions{})), protocol.CodeInvalidRequest, protocol.KindRefused)
	wantKind(t, "relay/executors with a bogus token", rawCall(t, r, protocol.MethodRelayExecutors, protocol.RelayExecutorsParams{Token: "opt_bogus"}), protocol.CodeInvalidRequest, protocol.KindRefused)
	first, err := dialVia(t, r, "web-1", clientTok, client.Config{NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	wantKind(t, "connect past the executor's stream limit", dialErr("web-1", clientTok), protocol.CodeInvalidRequest, protocol.KindExhausted)

	// A draining relay (the first client's stream keeps it draining).
	drained := make(chan error, 1)
	dctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	go func() { drained <- r.srv.Drain(dctx) }()
	deadline := time.Now().Add(testTimeout)
	for {
		err := dialErr("web-1", clientTok)
		var pe *protocol.Error
		if errors.As(err, &pe) && pe.Kind() == protocol.KindUnavailable && pe.Code == protocol.CodeInvalidRequest {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect to a draining relay: %v (kind %q), want unavailable", err, protocol.KindOf(err))
		}
		time.Sleep(10 * time.Millisecond)
	}
	first.Close()
	if err := <-drained; err != nil {
		t.Fatal(err)
	}
}

// A full relay is no refusal: the executor keeps trying, with backoff,
// and joins once there is room. A bad token still ends the join.
func TestJoinWaitsOutAFullRelayAndStopsAtARefusal(t *testing.T) {
	r := startRelayWith(t, Config{MaxExecutors: 1})
	first := join(t, r, "a", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	first.waitJoined(t)
	second := join(t, r, "b", r.token(t, TokenJoin, CreateOptions{Uses: 1}), key(t), nil)
	select {
	case err := <-second.done:
		second.done <- err // for the cleanup
		t.Fatalf("the join gave up on a full relay: %v", err)
	case <-second.joined:
		t.Fatal("joined a full relay")
	case <-time.After(1500 * time.Millisecond):
	}
	first.cancel() // room
	second.waitJoined(t)
	if got := r.srv.Executors(); len(got) != 1 || got[0] != "b" {
		t.Fatalf("executors %v", got)
	}

	bogus := join(t, r, "c", "opt_bogus", key(t), nil)
	select {
	case err := <-bogus.done:
		bogus.done <- err
		if !errors.Is(err, executor.ErrJoinRefused) || protocol.KindOf(err) != protocol.KindRefused {
			t.Fatalf("bogus token: %v (kind %q), want ErrJoinRefused of kind refused", err, protocol.KindOf(err))
		}
	case <-time.After(testTimeout):
		t.Fatal("a join with a bogus token was not refused")
	}
}
