package relay

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

const testTimeout = 30 * time.Second

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

func key(t *testing.T) identity.Key {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

type testRelay struct {
	srv    *Server
	ln     *Listener
	key    identity.Key
	tokens *Store
	addr   string
}

func (r *testRelay) url() string {
	return "outpost://" + r.addr + "#" + r.key.PublicKey().Fingerprint()
}

func startRelay(t *testing.T, k identity.Key, tokens *Store, addr string) *testRelay {
	t.Helper()
	srv, err := NewServer(Config{Key: k.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	r := &testRelay{srv: srv, ln: ln, key: k, tokens: tokens, addr: ln.Addr().String()}
	t.Cleanup(func() { ln.Close() })
	return r
}

func newRelay(t *testing.T) *testRelay {
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	return startRelay(t, key(t), tokens, "127.0.0.1:0")
}

func (r *testRelay) token(t *testing.T, kind TokenKind, o CreateOptions) string {
	secret, _, err := r.tokens.Create(kind, o)
	if err != nil {
		t.Fatal(err)
	}
	return secret
}

type testExecutor struct {
	srv    *executor.Server
	key    identity.Key
	cancel context.CancelFunc
	done   chan error
	joined chan struct{}
}

// join starts an executor joined to r as id.
func join(t *testing.T, r *testRelay, id, token string, k identity.Key, authorize func([]byte) error) *testExecutor {
	t.Helper()
	return startJoined(t, k, executor.JoinConfig{RelayURL: r.url(), ID: id, Token: token, Authorize: authorize})
}

// startJoined starts an executor with key k joining as jc says (its Key
// and Joined are filled in); it is stopped when the test ends.
func startJoined(t *testing.T, k identity.Key, jc executor.JoinConfig) *testExecutor {
	t.Helper()
	cfg := executor.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &testExecutor{srv: srv, key: k, cancel: cancel, done: make(chan error, 1), joined: make(chan struct{}, 16)}
	jc.Key, jc.Joined = k.Keypair(), func() { e.joined <- struct{}{} }
	go func() { e.done <- srv.Join(ctx, jc) }()
	t.Cleanup(func() {
		cancel()
		<-e.done
		sctx, c := context.WithTimeout(context.Background(), testTimeout)
		defer c()
		srv.Shutdown(sctx)
	})
	return e
}

func (e *testExecutor) waitJoined(t *testing.T) {
	t.Helper()
	select {
	case <-e.joined:
	case err := <-e.done:
		t.Fatalf("join ended: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("executor did not join")
	}
}

func dialVia(t *testing.T, r *testRelay, id, token string, opts client.Config) (*client.Remote, error) {
	t.Helper()
	opts.Executor, opts.Token = id, token
	if opts.Key == (identity.Key{}) {
		opts.Key = key(t)
	}
	if opts.KnownExecutors == "" {
		opts.KnownExecutors = filepath.Join(t.TempDir(), "known_executors")
	}
	env, err := client.Dial(ctxT(t), r.url(), opts)
	if err == nil {
		t.Cleanup(func() { env.Close() })
	}
	return env, err
}

var env0 = map[string]string{"PATH": "/usr/bin:/bin"}

func TestClientRunsCommandsThroughTheRelay(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "build-1", r.token(t, TokenJoin, CreateOptions{Uses: 1}), key(t), nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "build-1", r.token(t, TokenClient, CreateOptions{Executors: "build-*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.Command(env, "/bin/sh", "-c", "echo through the relay; echo err >&2").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "through the relay") {
		t.Fatalf("%q %v", out, err)
	}
	if got := r.srv.Executors(); len(got) != 1 || got[0] != "build-1" {
		t.Fatalf("executors %v", got)
	}
	if st := r.srv.Stats(); st.Executors != 1 || st.FailedHandshakes != 0 || st.BlockedAddresses != 0 || st.RedeemedTokens < 2 || st.RefusedTokens != 0 {
		t.Fatalf("stats %+v", st)
	}
	// The spliced stream's bytes are counted once it ends.
	env.Close()
	deadline := time.Now().Add(5 * time.Second)
	for r.srv.Stats().SplicedBytes < uint64(len(out)) {
		if time.Now().After(deadline) {
			t.Fatalf("spliced bytes %d after the stream ended, want ≥ %d", r.srv.Stats().SplicedBytes, len(out))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// recordingProxy puts a proxy in front of r that records everything the
// relay and its clients exchange; dial the returned relay to go through it.
func recordingProxy(t *testing.T, r *testRelay) (*testRelay, func() []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var seen bytes.Buffer
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", r.addr)
			if err != nil {
				c.Close()
				continue
			}
			record := writerFunc(func(p []byte) { mu.Lock(); seen.Write(p); mu.Unlock() })
			go func() {
				io.Copy(c, io.TeeReader(u, record))
				c.Close()
			}()
			go func() {
				io.Copy(u, io.TeeReader(c, record))
				u.Close()
			}()
		}
	}()
	return &testRelay{key: r.key, addr: ln.Addr().String()}, func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(seen.Bytes())
	}
}

func TestRelayNeverSeesPlaintext(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "x", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	proxied, seen := recordingProxy(t, r)
	env, err := dialVia(t, proxied, "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.Command(env, "/bin/sh", "-c", "echo MARKER-9e1f-$((6*7))").Output()
	if err != nil || string(out) != "MARKER-9e1f-42\n" {
		t.Fatalf("%q %v", out, err)
	}
	if b := seen(); len(b) == 0 || bytes.Contains(b, []byte("MARKER-9e1f")) {
		t.Fatalf("the relay's side of the wire (%d bytes) holds plaintext", len(b))
	}
}

type writerFunc func([]byte)

func (f writerFunc) Write(p []byte) (int, error) { f(p); return len(p), nil }

func TestImpersonatingExecutorIsRefused(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "db", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	impostor := join(t, r, "db", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	select {
	case err := <-impostor.done:
		if !errors.Is(err, executor.ErrJoinRefused) {
			t.Fatalf("impostor: %v", err)
		}
		impostor.done <- err // for the cleanup
	case <-time.After(testTimeout):
		t.Fatal("impostor was not refused")
	}
}

func TestOfflineUnknownAndUnauthorisedTargetsGetClearErrors(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "web-1", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	any := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	kindAndCode := func(err error) (protocol.Kind, int) {
		var pe *protocol.Error
		if !errors.As(err, &pe) {
			t.Fatalf("%v (%T) carries no *protocol.Error", err, err)
		}
		return pe.Kind(), pe.Code
	}
	// Never joined: not found, at once (waiting will not help).
	_, err := dialVia(t, r, "ghost", any, client.Config{NoResume: true})
	if k, _ := kindAndCode(err); k != protocol.KindNotFound {
		t.Fatalf("unknown executor: kind %q (%v)", k, err)
	}
	// Joined once, offline now: unavailable with code not-found, which
	// clients retry for their offline grace.
	if err := r.tokens.BindExecutor("web-2", key(t).PublicKey()); err != nil {
		t.Fatal(err)
	}
	_, err = dialVia(t, r, "web-2", any, client.Config{NoResume: true})
	if k, code := kindAndCode(err); k != protocol.KindUnavailable || code != protocol.CodeNotFound {
		t.Fatalf("offline executor: kind %q code %d (%v)", k, code, err)
	}
	// A token that may not reach the id learns nothing of it: refused,
	// whether it exists or not.
	for _, id := range []string{"web-1", "ghost"} {
		_, err = dialVia(t, r, id, r.token(t, TokenClient, CreateOptions{Executors: "db-*"}), client.Config{})
		if k, _ := kindAndCode(err); k != protocol.KindRefused {
			t.Fatalf("ACL, %s: kind %q (%v)", id, k, err)
		}
	}
	_, err = dialVia(t, r, "ghost", "opt_bogus", client.Config{})
	if k, _ := kindAndCode(err); k != protocol.KindRefused {
		t.Fatalf("bogus token: kind %q (%v)", k, err)
	}
	joinTok := r.token(t, TokenJoin, CreateOptions{})
	_, err = dialVia(t, r, "web-1", joinTok, client.Config{})
	if k, _ := kindAndCode(err); k != protocol.KindRefused {
		t.Fatalf("join token as a client token: kind %q (%v)", k, err)
	}
	// The bogus and the wrong-kind token; a client may retry, so at least.
	if st := r.srv.Stats(); st.RefusedTokens < 2 {
		t.Fatalf("refused tokens %d, want ≥ 2", st.RefusedTokens)
	}
	// A URL naming another key than the relay's: the error says which key
	// the relay presented.
	wrong := &testRelay{key: key(t), addr: r.addr}
	_, err = dialVia(t, wrong, "web-1", any, client.Config{})
	var km *relayclient.KeyMismatchError
	if !errors.As(err, &km) || km.Presented != r.key.PublicKey() || km.Named != wrong.key.PublicKey() {
		t.Fatalf("wrong relay key: %v (%T)", err, err)
	}
}

// A refusal must reach the client as itself. The relay used to close the
// connection right after its reply, and about one dial in ten then failed
// with yamux's "session shutdown" instead of the reason.
func TestRefusalIsNeverLostToTheRelayHangingUp(t *testing.T) {
	r := newRelay(t)
	for i := range 200 {
		_, err := dialVia(t, r, "web-1", "opt_bogus", client.Config{NoResume: true})
		if protocol.KindOf(err) != protocol.KindRefused {
			t.Fatalf("dial %d: %v", i, err)
		}
	}
}

func TestExecutorAllowListRefusesClientsTheRelayBrings(t *testing.T) {
	r := newRelay(t)
	allowed := key(t)
	e := join(t, r, "vault", r.token(t, TokenJoin, CreateOptions{}), key(t), func(peer []byte) error {
		if !bytes.Equal(peer, allowed.Public[:]) {
			return errors.New("not on the allow-list")
		}
		return nil
	})
	e.waitJoined(t)
	tok := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	if _, err := dialVia(t, r, "vault", tok, client.Config{Key: key(t), NoResume: true}); err == nil {
		t.Fatal("a client outside the executor's allow-list got in through the relay")
	}
	env, err := dialVia(t, r, "vault", tok, client.Config{Key: allowed})
	if err != nil {
		t.Fatal(err)
	}
	env.Close()
}

func TestRelayRestartMidStreamLosesNothing(t *testing.T) {
	dir := t.TempDir()
	tokens, err := OpenStore(filepath.Join(dir, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	rk := key(t)
	r := startRelay(t, rk, tokens, "127.0.0.1:0")
	e := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "w", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{RecoveryTimeout: 25 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	const lines = 200000
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("seq %d | while read n; do echo $n; case $n in 1000) sleep 1;; esac; done", lines)}, Env: env0})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	restarted := false
	for ev := range p.Events() {
		if ev.Kind == client.EventFailed {
			t.Fatalf("failed: %v", ev.Err)
		}
		got.Write(ev.Data)
		if !restarted && got.Len() > 1000 {
			restarted = true
			r.ln.Close()
			r = startRelay(t, rk, tokens, r.addr)
		}
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("got %d bytes, want %d", got.Len(), want.Len())
	}
	if env.Reconnects() == 0 {
		t.Fatal("the client never reconnected")
	}
}

func TestAddressWithTooManyFailedHandshakesIsRefused(t *testing.T) {
	tokens, err := OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	srv, _ := NewServer(Config{Key: key(t).Keypair(), Tokens: tokens, MaxFailedHandshakes: 3, FailureWindow: time.Minute})
	ln, err := srv.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	// Garbage handshakes until the address is refused outright.
	for i := 0; i < 3; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte("GET / HTTP/1.1\r\n\r\n"))
		io.Copy(io.Discard, c) // the relay hangs up
		c.Close()
	}
	if !srv.blocked("127.0.0.1") {
		t.Fatal("the address was not blocked after 3 failures")
	}
	if st := srv.Stats(); st.FailedHandshakes != 3 || st.BlockedAddresses != 1 {
		t.Fatalf("stats %+v, want 3 failed handshakes and 1 blocked address", st)
	}
}

func TestGarbageAtTheRelayPortLeavesItServing(t *testing.T) {
	r := newRelay(t)
	for _, junk := range []string{"", "\x00\x00\x00", "OP\x01\x01\xff\xff", strings.Repeat("A", 100000)} {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write([]byte(junk))
		c.Close()
	}
	e := join(t, r, "after-junk", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "after-junk", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env, "echo", "ok").Output(); err != nil || string(out) != "ok\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestRelayOverWebSocket(t *testing.T) {
	r := newRelay(t)
	wl, err := r.srv.ListenWS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Close()
	ws := &testRelay{srv: r.srv, key: r.key, tokens: r.tokens, addr: wl.Addr().String()}
	wsURL := "outpost+ws://" + ws.addr + "#" + r.key.PublicKey().Fingerprint()
	cfg := executor.DefaultConfig()
	srv, _ := executor.NewServer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	joined := make(chan struct{}, 1)
	go srv.Join(ctx, executor.JoinConfig{RelayURL: wsURL, Key: key(t).Keypair(), ID: "behind-proxy", Token: r.token(t, TokenJoin, CreateOptions{}), Joined: func() { joined <- struct{}{} }})
	select {
	case <-joined:
	case <-time.After(testTimeout):
		t.Fatal("no join over WebSocket")
	}
	env, err := client.Dial(ctxT(t), wsURL, client.Config{Key: key(t), Executor: "behind-proxy", Token: r.token(t, TokenClient, CreateOptions{Executors: "*"}), KnownExecutors: filepath.Join(t.TempDir(), "k")})
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if out, err := client.Command(env, "echo", "over websocket").Output(); err != nil || string(out) != "over websocket\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestExecutorGoingAwayFailsClientsPromptlyAsOffline(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "leaving", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "leaving", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{OfflineGrace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"sleep", "60"}, Env: env0})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	e.cancel() // the executor leaves (and its processes with it)
	<-p.Done()
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "executor leaving is offline") {
		t.Fatalf("err = %v", err)
	}
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("offline reported after %v", d)
	}
}

// rawControl opens a relay connection whose request is yet to be sent.
func rawControl(t *testing.T, r *testRelay) *relayclient.Conn {
	t.Helper()
	rc, err := relayclient.Dial(ctxT(t), r.url(), key(t).Keypair(), relayclient.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rc.Close() })
	return rc
}

func TestDrainHandsExecutorsToTheSuccessorWithoutCuttingOpenStreams(t *testing.T) {
	dir := t.TempDir()
	tokens, err := OpenStore(filepath.Join(dir, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	rk := key(t)
	a := startRelay(t, rk, tokens, "127.0.0.1:0")
	e := join(t, a, "w", a.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	clientToken := a.token(t, TokenClient, CreateOptions{Executors: "*"})
	env, err := dialVia(t, a, "w", clientToken, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo before; read x; echo after $x"}, Env: env0, PipeStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	late := rawControl(t, a) // connected before the drain, asks after it

	a.ln.StopAccepting()
	drained := make(chan error, 1)
	go func() { drained <- a.srv.Drain(ctxT(t)) }()

	// The executor is told at once and joins the successor on the same
	// address while its open stream stays on the old relay.
	b := startRelay(t, rk, tokens, a.addr)
	e.waitJoined(t)
	if got := b.srv.Executors(); len(got) != 1 {
		t.Fatalf("successor executors %v", got)
	}
	_, _, err = late.Connect(ctxT(t), "w", clientToken)
	if refusal := (*protocol.Error)(nil); !errors.As(err, &refusal) || !strings.Contains(refusal.Message, ErrShuttingDown.Error()) || protocol.KindOf(err) != protocol.KindUnavailable {
		t.Fatalf("connect while draining: %v", err)
	}
	select {
	case err := <-drained:
		t.Fatalf("drain ended with a client stream open: %v", err)
	default:
	}

	if _, err := p.Write(ctxT(t), []byte("x\n")); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	for ev := range p.Events() {
		out.Write(ev.Data)
	}
	if res, err := p.Wait(ctxT(t)); err != nil || res.ExitCode != 0 || out.String() != "before\nafter x\n" {
		t.Fatalf("%q %+v %v", out.String(), res, err)
	}
	env.Close()
	if err := <-drained; err != nil {
		t.Fatalf("drain: %v", err)
	}

	env2, err := dialVia(t, b, "w", clientToken, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env2, "/bin/echo", "on the successor").Output(); err != nil || string(out) != "on the successor\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestDrainGivesUpAtItsDeadlineNamingOpenStreams(t *testing.T) {
	r := newRelay(t)
	e := join(t, r, "w", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	e.waitJoined(t)
	env, err := dialVia(t, r, "w", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := client.Command(env, "/bin/true").Output(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = r.srv.Drain(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "1 client streams still open") {
		t.Fatalf("drain: %v", err)
	}
}

func TestTraceContextCrossesTheRelayEncryptedAndJoinsTheExecutorsSpans(t *testing.T) {
	r := newRelay(t)
	execSpans, clientSpans := tracetest.NewSpanRecorder(), tracetest.NewSpanRecorder()
	execTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(execSpans))
	clientTP := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(clientSpans))
	cfg := executor.DefaultConfig()
	cfg.TracerProvider = execTP
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	joined, done := make(chan struct{}, 1), make(chan struct{})
	go func() {
		defer close(done)
		srv.Join(ctx, executor.JoinConfig{RelayURL: r.url(), Key: key(t).Keypair(), ID: "traced", Token: r.token(t, TokenJoin, CreateOptions{}),
			Joined: func() { joined <- struct{}{} }})
	}()
	defer func() { cancel(); <-done; srv.Shutdown(context.Background()) }()
	<-joined
	proxied, seen := recordingProxy(t, r)
	env, err := dialVia(t, proxied, "traced", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{TracerProvider: clientTP})
	if err != nil {
		t.Fatal(err)
	}
	rootCtx, root := clientTP.Tracer("test").Start(ctxT(t), "agent step")
	p, err := env.Start(rootCtx, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "exit 3"}, Env: env0})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctxT(t)); err != nil || res.ExitCode != 3 {
		t.Fatalf("%+v %v", res, err)
	}
	root.End()
	byName := func(rec *tracetest.SpanRecorder, name string) sdktrace.ReadOnlySpan {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			for _, s := range rec.Ended() {
				if s.Name() == name {
					return s
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no %q span", name)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	connect, start := byName(clientSpans, "outpost.connect"), byName(clientSpans, "process/start")
	handshake := byName(execSpans, "outpost.handshake")
	if handshake.Parent().SpanID() != connect.SpanContext().SpanID() || handshake.SpanContext().TraceID() != connect.SpanContext().TraceID() {
		t.Fatalf("the executor's handshake span is not a child of the client's connect span")
	}
	if !handshake.EndTime().After(handshake.StartTime()) {
		t.Fatalf("handshake span %v..%v", handshake.StartTime(), handshake.EndTime())
	}
	execStart := byName(execSpans, "process/start")
	if execStart.Parent().SpanID() != start.SpanContext().SpanID() || execStart.SpanContext().TraceID() != root.SpanContext().TraceID() {
		t.Fatalf("the executor's process/start span is not in the client's trace")
	}
	proc := byName(execSpans, "process")
	if proc.Parent().SpanID() != execStart.SpanContext().SpanID() {
		t.Fatal("the process span is not a child of process/start")
	}
	attrs := map[string]any{}
	for _, a := range proc.Attributes() {
		attrs[string(a.Key)] = a.Value.AsInterface()
	}
	if attrs["process.exit.code"] != int64(3) || proc.Status().Code != codes.Error {
		t.Fatalf("process span %v, status %v", attrs, proc.Status())
	}
	// The trace context crossed the relay only encrypted.
	traceID := root.SpanContext().TraceID().String()
	if b := seen(); len(b) == 0 || bytes.Contains(b, []byte(traceID)) || bytes.Contains(b, []byte("traceparent")) {
		t.Fatalf("the relay saw the trace context in %d bytes", len(b))
	}
}

// An executor given a relay URL whose fingerprint is not the relay's key
// stops at once, saying which key the relay presented, instead of
// knocking forever.
func TestJoinWithTheWrongRelayKeyEndsSayingWhich(t *testing.T) {
	r := newRelay(t)
	wrong := &testRelay{key: key(t), addr: r.addr, tokens: r.tokens}
	e := join(t, wrong, "w", r.token(t, TokenJoin, CreateOptions{}), key(t), nil)
	var err error
	select {
	case err = <-e.done:
		e.done <- err // for the cleanup
	case <-time.After(testTimeout):
		t.Fatal("join kept retrying with the wrong relay key")
	}
	var km *relayclient.KeyMismatchError
	if !errors.As(err, &km) || km.Presented != r.key.PublicKey() {
		t.Fatalf("join ended with %v (%T)", err, err)
	}
}
