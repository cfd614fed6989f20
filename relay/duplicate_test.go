package relay

import (
	"context"
	"errors"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

// observedLogger logs to the test and records every entry at info or above.
func observedLogger(t *testing.T) (*zap.Logger, *observer.ObservedLogs) {
	core, logs := observer.New(zap.InfoLevel)
	return zaptest.NewLogger(t, zaptest.WrapOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core { return zapcore.NewTee(c, core) }))), logs
}

// newRelayWith starts a relay on loopback with cfg tuned by tune, logging
// to the returned observer too.
func newRelayWith(t *testing.T, tune func(*Config)) (*testRelay, *observer.ObservedLogs) {
	t.Helper()
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	k := key(t)
	log, logs := observedLogger(t)
	cfg := Config{Key: k.Keypair(), Tokens: tokens, Logger: log}
	if tune != nil {
		tune(&cfg)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &testRelay{srv: srv, ln: ln, key: k, tokens: tokens, addr: ln.Addr().String()}, logs
}

// joinLogged is join with the executor logging to log.
func joinLogged(t *testing.T, r *testRelay, id, token string, k identity.Key, log *zap.Logger) *testExecutor {
	t.Helper()
	cfg := executor.DefaultConfig()
	cfg.Logger = log
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &testExecutor{srv: srv, key: k, cancel: cancel, done: make(chan error, 1), joined: make(chan struct{}, 16)}
	go func() {
		e.done <- srv.Join(ctx, executor.JoinConfig{RelayURL: r.url(), Key: k.Keypair(), ID: id, Token: token, Joined: func() { e.joined <- struct{}{} }})
	}()
	t.Cleanup(func() {
		cancel()
		<-e.done
		sctx, c := context.WithTimeout(context.Background(), testTimeout)
		defer c()
		srv.Shutdown(sctx)
	})
	return e
}

// rawJoin sends one relay/join with key k, as an executor would, and
// returns the relay's error (nil when it accepted the join). The session is
// closed before it returns.
func rawJoin(t *testing.T, r *testRelay, k identity.Key, id, token string) *protocol.Error {
	t.Helper()
	ctx := ctxT(t)
	rc, err := relayclient.Dial(ctx, r.url(), k.Keypair(), relayclient.Options{})
	if err != nil {
		t.Error(err)
		return nil
	}
	defer rc.Close()
	_, err = rc.Join(ctx, protocol.RelayJoinParams{ExecutorID: id, Token: token})
	if refusal := (*protocol.Error)(nil); errors.As(err, &refusal) {
		return refusal
	}
	if err != nil {
		t.Error(err)
	}
	return nil
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func runEcho(t *testing.T, env *client.Remote, word string) {
	t.Helper()
	out, err := client.Command(env, "/bin/echo", word).Output()
	if err != nil || string(out) != word+"\n" {
		t.Errorf("echo %s: %q %v", word, out, err)
	}
}

// A second holder of an executor's key (a stolen executor.key) cannot take
// the id from the live executor: every attempt is refused with a distinct
// code, logged and counted, and the executor keeps its session and keeps
// serving clients throughout.
func TestStolenKeyCannotTakeTheIDFromALiveExecutor(t *testing.T) {
	r, logs := newRelayWith(t, nil)
	k := key(t)
	e := join(t, r, "db", r.token(t, TokenJoin, CreateOptions{Uses: 1}), k, nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "db", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runEcho(t, env, "before")

	// Many impostor joins with the stolen key, some at once, while a client
	// keeps running commands on the real executor.
	const attempts = 30
	stopClient := make(chan struct{})
	clientDone := make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-stopClient:
				clientDone <- n
				return
			default:
			}
			runEcho(t, env, "during")
			n++
		}
	}()
	codes := make(chan *protocol.Error, attempts)
	var wg sync.WaitGroup
	for i := range attempts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if i%3 == 0 {
				time.Sleep(time.Duration(i) * 5 * time.Millisecond) // some at once, some spread out
			}
			codes <- rawJoin(t, r, k, "db", "")
		}()
	}
	wg.Wait()
	close(codes)
	for perr := range codes {
		if perr == nil || perr.Code != protocol.CodeRelayAlreadyJoined || !strings.Contains(perr.Message, "executor id db is already joined from another connection with this key") {
			t.Fatalf("impostor join: %+v, want code %d", perr, protocol.CodeRelayAlreadyJoined)
		}
	}

	// An impostor running the real join loop is refused the same way; it
	// says what to do, and keeps retrying rather than giving up.
	ilog, ilogs := observedLogger(t)
	impostor := joinLogged(t, r, "db", "", k, ilog)
	const advice = "executor id db is already joined from another connection with this key — if this is not you, your executor.key is stolen: run `outpost executors revoke db` on the relay"
	waitFor(t, 10*time.Second, "the impostor's join loop did not warn twice", func() bool {
		return ilogs.FilterMessage(advice).FilterLevelExact(zap.WarnLevel).Len() >= 2
	})
	select {
	case err := <-impostor.done:
		t.Fatalf("the impostor's join loop gave up: %v", err)
	case <-impostor.joined:
		t.Fatal("the impostor joined")
	default:
	}
	close(stopClient)
	if n := <-clientDone; n == 0 {
		t.Fatal("no command ran during the impostor's attempts")
	}
	runEcho(t, env, "after")

	// The real executor never lost its session.
	select {
	case <-e.joined:
		t.Fatal("the real executor had to join again")
	default:
	}
	if got := r.srv.Executors(); len(got) != 1 || got[0] != "db" {
		t.Fatalf("executors %v", got)
	}
	impostor.cancel()
	refused := logs.FilterMessageSnippet("duplicate executor join refused")
	st := r.srv.Stats()
	if st.DuplicateJoins < attempts+2 || st.DuplicateJoins != uint64(refused.Len()) {
		t.Fatalf("duplicate joins %d, refusals logged %d, want ≥ %d and equal", st.DuplicateJoins, refused.Len(), attempts+2)
	}
	for _, entry := range refused.All() {
		f := entry.ContextMap()
		if entry.Level != zap.WarnLevel || f["executor"] != "db" || f["fingerprint"] != k.PublicKey().Fingerprint() || !strings.HasPrefix(f["remote"].(string), "127.0.0.1:") {
			t.Fatalf("refusal logged as %v %v", entry.Level, f)
		}
	}
	if st.Executors != 1 || st.RevokedKeyJoins != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// The refused second holder keeps retrying, so once the session holding the
// id is really gone it gets the id (this is what a real executor refused
// during a reconnect race relies on).
func TestRefusedDuplicateJoinsOnceTheHolderIsGone(t *testing.T) {
	r, _ := newRelayWith(t, func(c *Config) { c.LivenessTimeout = 300 * time.Millisecond })
	k := key(t)
	first := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{}), k, nil)
	first.waitJoined(t)
	log, logs := observedLogger(t)
	second := joinLogged(t, r, "w", "", k, log)
	waitFor(t, 10*time.Second, "the second was not refused", func() bool {
		return logs.FilterMessageSnippet("already joined from another connection").Len() >= 1
	})
	first.cancel()
	select {
	case <-second.joined:
	case err := <-second.done:
		t.Fatalf("the second join loop ended: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("the second did not take the id once the first left")
	}
}

// cutProxy forwards TCP connections to a relay; cut makes every connection
// it carries silently dead to the relay: the executor's side is closed, the
// relay's side stays open but nothing crosses it any more (no FIN, no RST),
// as when a NAT or a middlebox drops a mapping.
type cutProxy struct {
	ln net.Listener
	mu sync.Mutex
	// down are the executors' sides of the live pairs; up are the relay's
	// sides of every pair, closed only at cleanup.
	down, up []net.Conn
}

func startCutProxy(t *testing.T, target string) *cutProxy {
	p := &cutProxy{}
	t.Cleanup(func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range append(p.down, p.up...) {
			c.Close()
		}
	})
	p.ln = listenForwarding(t, target, func(c, u net.Conn) {
		p.mu.Lock()
		p.down, p.up = append(p.down, c), append(p.up, u)
		p.mu.Unlock()
		// Neither copy closes u when it stops: that is the cut.
		go io.Copy(u, c)
		go io.Copy(c, u)
	})
	return p
}

// listenForwarding accepts TCP connections on loopback until the test
// ends and hands each, with a fresh connection to target, to pair.
func listenForwarding(t *testing.T, target string, pair func(down, up net.Conn)) net.Listener {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			pair(c, u)
		}
	}()
	return ln
}

func (p *cutProxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.down {
		c.Close()
	}
	p.down = nil
}

// An executor whose connection died without the relay noticing rejoins
// with its key at once: its old session no longer answers the relay's ping,
// so the relay drops it and lets the new one in.
func TestExecutorRejoinsAfterItsConnectionDiedSilently(t *testing.T) {
	r, logs := newRelayWith(t, func(c *Config) { c.LivenessTimeout = 500 * time.Millisecond })
	proxy := startCutProxy(t, r.addr)
	viaProxy := &testRelay{srv: r.srv, key: r.key, tokens: r.tokens, addr: proxy.ln.Addr().String()}
	k := key(t)
	e := join(t, viaProxy, "edge", r.token(t, TokenJoin, CreateOptions{Uses: 1}), k, nil)
	e.waitJoined(t)
	clientToken := r.token(t, TokenClient, CreateOptions{Executors: "*"})

	proxy.cut()
	start := time.Now()
	e.waitJoined(t)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("rejoined after %v", d)
	}
	if n := logs.FilterMessageSnippet("did not answer a ping").Len(); n != 1 {
		t.Fatalf("%d stale sessions dropped, want 1", n)
	}
	if st := r.srv.Stats(); st.DuplicateJoins != 0 || st.Executors != 1 {
		t.Fatalf("stats %+v", st)
	}
	env, err := dialVia(t, r, "edge", clientToken, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runEcho(t, env, "rejoined")
}

// After a revocation made through another Store on the same file (as
// `outpost executors revoke` does while the relay runs), the relay cuts the
// joined session within its poll; the key is refused from then on, under
// any id and with any token; a new key with a new join token binds the id.
func TestRevokedKeyIsCutAndNeverJoinsAgain(t *testing.T) {
	r, logs := newRelayWith(t, func(c *Config) { c.RevocationPoll = 50 * time.Millisecond })
	old := key(t)
	e := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{Uses: 1}), old, nil)
	e.waitJoined(t)
	clientToken := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	env, err := dialVia(t, r, "w", clientToken, client.Config{NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	runEcho(t, env, "before")

	cli, err := OpenStore(r.tokens.path)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	rev, err := cli.RevokeExecutor("w")
	if err != nil || rev.Key != [32]byte(old.PublicKey()) || len(rev.IDs) != 1 || rev.IDs[0] != "w" {
		t.Fatalf("revoke: %+v %v", rev, err)
	}
	// The session is cut; the join loop reconnects, is refused for good and
	// says so with a kind of its own.
	select {
	case err := <-e.done:
		if !errors.Is(err, executor.ErrJoinRefused) || !errors.Is(err, executor.ErrKeyRevoked) {
			t.Fatalf("join loop ended with %v", err)
		}
		e.done <- err // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked executor was not cut")
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("cut after %v", d)
	}
	if got := r.srv.Executors(); len(got) != 0 {
		t.Fatalf("executors %v", got)
	}
	if n := logs.FilterMessage("executor key revoked: session closed").Len(); n != 1 {
		t.Fatalf("%d sessions logged as cut", n)
	}

	// The old key under another id, with a valid join token: refused, and
	// the token is not spent.
	fresh, tok, err := r.tokens.Create(TokenJoin, CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"w", "elsewhere"} {
		if perr := rawJoin(t, r, old, id, fresh); perr == nil || perr.Code != protocol.CodeRelayKeyRevoked || !strings.Contains(perr.Message, "revoked") {
			t.Fatalf("old key as %s: %+v", id, perr)
		}
	}
	toks, _ := r.tokens.List()
	for _, x := range toks {
		if x.ID == tok.ID && x.Used != 0 {
			t.Fatalf("a revoked key spent a join token: %+v", x)
		}
	}

	// A new key needs a join token, and with one binds the id.
	if perr := rawJoin(t, r, key(t), "w", ""); perr == nil || perr.Code != protocol.CodeInvalidRequest {
		t.Fatalf("new key without a token: %+v", perr)
	}
	e2 := join(t, r, "w", fresh, key(t), nil)
	e2.waitJoined(t)
	env2, err := dialVia(t, r, "w", clientToken, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runEcho(t, env2, "new key")
	if st := r.srv.Stats(); st.RevokedSessions != 1 || st.RevokedKeyJoins < 3 || st.Executors != 1 {
		t.Fatalf("stats %+v", st)
	}
}

// A new key that binds a revoked executor's id takes it even before the
// relay has noticed the revocation: the old session's key is no longer the
// id's, so it is dropped rather than pinged.
func TestNewKeyReplacesARevokedSessionNotYetCut(t *testing.T) {
	r, _ := newRelayWith(t, func(c *Config) { c.RevocationPoll = time.Hour })
	old := key(t)
	e := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{}), old, nil)
	e.waitJoined(t)
	if _, err := r.tokens.RevokeExecutor("w"); err != nil {
		t.Fatal(err)
	}
	e2 := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e2.waitJoined(t)
	select {
	case err := <-e.done:
		if !errors.Is(err, executor.ErrKeyRevoked) {
			t.Fatalf("old join loop: %v", err)
		}
		e.done <- err
	case <-time.After(10 * time.Second):
		t.Fatal("the revoked session was not dropped")
	}
	env, err := dialVia(t, r, "w", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	runEcho(t, env, "replaced")
}
