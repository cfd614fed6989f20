package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/protocol"
)

const testTimeout = 30 * time.Second

type testExecutor struct {
	srv *executor.Server
	ln  *executor.NativeListener
	key identity.Key
	url string // with fingerprint
}

func startExecutor(t *testing.T, tweak func(*executor.Config, *executor.NativeConfig)) *testExecutor {
	t.Helper()
	key, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := executor.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	opts := executor.NativeConfig{Key: key.Keypair()}
	if tweak != nil {
		tweak(&cfg, &opts)
	}
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return &testExecutor{srv: srv, ln: ln, key: key, url: ln.URL() + "#" + key.PublicKey().Fingerprint()}
}

func newKey(t *testing.T) identity.Key {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func dial(t *testing.T, url string, cfg Config) *Remote {
	t.Helper()
	if cfg.Key == (identity.Key{}) {
		cfg.Key = newKey(t)
	}
	if cfg.KnownExecutors == "" {
		cfg.KnownExecutors = filepath.Join(t.TempDir(), "known_executors")
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	r, err := Dial(ctx, url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

var testEnv = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}

// proxy forwards TCP connections to target and can cut them all, as a
// network failure would; it records every byte that crosses it. While up
// (or down) is held it swallows what the client (or the executor) sends,
// as a path dying under a request would.
type proxy struct {
	ln       net.Listener
	target   string
	mu       sync.Mutex
	conns    []net.Conn
	seen     bytes.Buffer
	up, down atomic.Bool
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { ln.Close(); p.cut() })
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
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go p.pipe(c, u, &p.down)
			go p.pipe(u, c, &p.up)
		}
	}()
	return p
}

func (p *proxy) pipe(dst, src net.Conn, hold *atomic.Bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && !hold.Load() {
			p.mu.Lock()
			if p.seen.Len() < 64<<20 {
				p.seen.Write(buf[:n])
			}
			p.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

func (p *proxy) url(ex *testExecutor) string {
	return "tcp://" + p.ln.Addr().String() + "#" + ex.key.PublicKey().Fingerprint()
}

func TestNativeRunsACommandEndToEnd(t *testing.T) {
	ex := startExecutor(t, nil)
	env := dial(t, ex.url, Config{})
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 4"}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Wait(ctxT(t))
	if err != nil || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || res.ExitCode != 4 {
		t.Fatalf("%+v %v", res, err)
	}
	info, err := env.Info(ctxT(t))
	if err != nil || info.PlatformOS != "linux" {
		t.Fatalf("%+v %v", info, err)
	}
}

func TestWireNeverCarriesPlaintextOutput(t *testing.T) {
	ex := startExecutor(t, nil)
	px := startProxy(t, ex.ln.Addr().String())
	env := dial(t, px.url(ex), Config{})
	out, err := Command(env, "/bin/sh", "-c", "for i in 1 2 3; do echo MARKER-c0ffee-$i; done").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "MARKER-c0ffee-3") {
		t.Fatalf("%q %v", out, err)
	}
	px.mu.Lock()
	seen := px.seen.Bytes()
	px.mu.Unlock()
	if len(seen) == 0 || bytes.Contains(seen, []byte("MARKER-c0ffee")) || bytes.Contains(seen, []byte("/bin/sh")) {
		t.Fatalf("the capture (%d bytes) holds plaintext", len(seen))
	}
}

func TestConnectionCutMidStreamResumesWithEveryByteOnceInOrder(t *testing.T) {
	ex := startExecutor(t, nil)
	px := startProxy(t, ex.ln.Addr().String())
	env := dial(t, px.url(ex), Config{RecoveryTimeout: 20 * time.Second})
	const lines = 300000
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"seq", strconv.Itoa(lines)}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	var got bytes.Buffer
	cuts := 0
	var lastSeq uint64
	for ev := range p.Events() {
		if ev.Seq != lastSeq+1 {
			t.Fatalf("seq %d after %d", ev.Seq, lastSeq)
		}
		lastSeq = ev.Seq
		switch ev.Kind {
		case EventOutput:
			got.Write(ev.Data)
			// Cut the connection twice while output is streaming.
			if (cuts == 0 && got.Len() > 200<<10) || (cuts == 1 && got.Len() > 1<<20) {
				cuts++
				px.cut()
			}
		case EventFailed:
			t.Fatalf("failed: %v", ev.Err)
		}
	}
	if p.Err() != nil {
		t.Fatal(p.Err())
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("output differs: got %d bytes, want %d", got.Len(), want.Len())
	}
	if cuts != 2 || env.Reconnects() < 1 {
		t.Fatalf("cuts %d, reconnects %d", cuts, env.Reconnects())
	}
}

func TestResumeReportsLostOutputExplicitly(t *testing.T) {
	// A tiny retention buffer and a long disconnection: the output the
	// client missed is gone, and it must say so rather than skip it.
	gate := filepath.Join(t.TempDir(), "gate")
	ex := startExecutor(t, func(c *executor.Config, _ *executor.NativeConfig) {
		lb := engine.NewLocalBackend()
		lb.Retention = engine.Retention{MaxBytes: 64 << 10, MaxChunks: 4}
		c.Backend = lb
	})
	px := startProxy(t, ex.ln.Addr().String())
	env := dial(t, px.url(ex), Config{RecoveryTimeout: 20 * time.Second})
	script := "echo first; while [ ! -e " + gate + " ]; do sleep 0.01; done; seq 1 100000; sleep 60"
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", script}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-p.Events(); string(ev.Data) != "first\n" {
		t.Fatalf("%+v", ev)
	}
	// Stop the proxy from accepting while output is produced, so the
	// client cannot come back before the executor evicts.
	px.ln.Close()
	px.cut()
	os.WriteFile(gate, nil, 0o600)
	time.Sleep(300 * time.Millisecond)
	px2, err := net.Listen("tcp", px.ln.Addr().String())
	if err != nil {
		t.Fatalf("could not reopen the proxy port: %v", err)
	}
	px.ln = px2
	go func() {
		for {
			c, err := px2.Accept()
			if err != nil {
				return
			}
			u, _ := net.Dial("tcp", px.target)
			go px.pipe(c, u, &px.down)
			go px.pipe(u, c, &px.up)
		}
	}()
	var failure error
	for ev := range p.Events() {
		if ev.Kind == EventFailed {
			failure = ev.Err
		}
	}
	var lost *ErrOutputLost
	if !errors.As(failure, &lost) || lost.FromSeq < 2 {
		t.Fatalf("failure %v, want *ErrOutputLost", failure)
	}
}

func TestStalledReaderOnOneProcessDoesNotDelayAnother(t *testing.T) {
	ex := startExecutor(t, nil)
	env := dial(t, ex.url, Config{})
	ctx := ctxT(t)
	flood, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"head", "-c", "1000000000", "/dev/zero"}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	// Nobody reads flood's events: its buffer and stream window fill.
	for i := 0; i < 20; i++ {
		out, err := Command(env, "echo", strconv.Itoa(i)).Output()
		if err != nil || string(out) != strconv.Itoa(i)+"\n" {
			t.Fatalf("run %d behind a stalled reader: %q %v", i, out, err)
		}
	}
	select {
	case <-flood.Done():
		t.Fatal("the flood finished although nobody read it: no backpressure")
	default:
	}
	flood.Terminate(ctx)
}

func TestThousandConcurrentProcessesOnOneConnection(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 1,000 processes")
	}
	ex := startExecutor(t, nil)
	env := dial(t, ex.url, Config{})
	ctx := ctxT(t)
	const n = 1000
	var wg sync.WaitGroup
	var failures atomic.Int32
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "sleep 0.2; echo $0", strconv.Itoa(i)}, Env: testEnv})
			if err != nil {
				failures.Add(1)
				t.Errorf("start %d: %v", i, err)
				return
			}
			res, err := p.Wait(ctx)
			if err != nil || string(res.Stdout) != strconv.Itoa(i)+"\n" {
				failures.Add(1)
				t.Errorf("process %d: %q %v", i, res.Stdout, err)
			}
		}()
	}
	wg.Wait()
	if failures.Load() > 0 {
		t.Fatalf("%d of %d failed", failures.Load(), n)
	}
}

func TestFirstContactPinsTheExecutorAndAChangedKeyIsRefused(t *testing.T) {
	ex := startExecutor(t, nil)
	known := filepath.Join(t.TempDir(), "known_executors")
	addr := ex.ln.URL() // no fingerprint: trust on first use
	env := dial(t, addr, Config{KnownExecutors: known})
	env.Close()
	data, _ := os.ReadFile(known)
	if !strings.Contains(string(data), addr+" "+ex.key.PublicKey().Fingerprint()) {
		t.Fatalf("known_executors after first contact: %q", data)
	}
	dial(t, addr, Config{KnownExecutors: known}).Close() // IK with the pin

	// Another executor now answers at the same address.
	ex.ln.Close()
	other := newKey(t)
	srv, _ := executor.NewServer(executor.DefaultConfig())
	ln, err := srv.ListenNative(addr, executor.NativeConfig{Key: other.Keypair()})
	if err != nil {
		t.Fatalf("could not rebind %s: %v", addr, err)
	}
	defer ln.Close()
	_, err = Dial(ctxT(t), addr, Config{Key: newKey(t), KnownExecutors: known})
	var mismatch *identity.KeyMismatchError
	if !errors.As(err, &mismatch) {
		t.Fatalf("err = %v, want a key mismatch", err)
	}
	for _, fp := range []string{ex.key.PublicKey().Fingerprint(), other.PublicKey().Fingerprint()} {
		if !strings.Contains(err.Error(), fp) {
			t.Fatalf("message %q lacks fingerprint %s", err, fp)
		}
	}
}

func TestWrongPinIsRefusedWithBothFingerprints(t *testing.T) {
	ex := startExecutor(t, nil)
	wrong := newKey(t).PublicKey().Fingerprint()
	_, err := Dial(ctxT(t), ex.ln.URL()+"#"+wrong, Config{Key: newKey(t)})
	if err == nil || !strings.Contains(err.Error(), wrong) || !strings.Contains(err.Error(), ex.key.PublicKey().Fingerprint()) {
		t.Fatalf("err = %v", err)
	}
}

func TestNoTOFURefusesAnUnpinnedExecutor(t *testing.T) {
	ex := startExecutor(t, nil)
	_, err := Dial(ctxT(t), ex.ln.URL(), Config{Key: newKey(t), NoTOFU: true, KnownExecutors: filepath.Join(t.TempDir(), "k")})
	if err == nil || !strings.Contains(err.Error(), "no pinned key") {
		t.Fatalf("err = %v", err)
	}
}

func TestCommandIsShapedLikeExecCmd(t *testing.T) {
	env := dial(t, startExecutor(t, nil).url, Config{})
	out, err := Command(env, "tr", "a-z", "A-Z").Output()
	if err != nil || len(out) != 0 {
		t.Fatalf("no stdin: %q %v", out, err)
	}
	cmd := Command(env, "tr", "a-z", "A-Z")
	cmd.Stdin = strings.NewReader(strings.Repeat("hello\n", 50000))
	out, err = cmd.Output()
	if err != nil || string(out) != strings.Repeat("HELLO\n", 50000) {
		t.Fatalf("stdin piped: %d bytes %v", len(out), err)
	}
	_, err = Command(env, "/bin/sh", "-c", "echo oops >&2; exit 3").Output()
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != 3 || string(ee.Stderr) != "oops\n" {
		t.Fatalf("exit error: %v", err)
	}
	out, err = Command(env, "/bin/sh", "-c", "echo a; echo b >&2").CombinedOutput()
	if err != nil || len(out) != 4 {
		t.Fatalf("combined: %q %v", out, err)
	}
	cmd = Command(env, "/bin/sh", "-c", "echo $0 $FOO; pwd")
	cmd.Args[0] = "renamed"
	cmd.Env = []string{"FOO=bar", "PATH=/usr/bin:/bin"}
	cmd.Dir = "/tmp"
	out, err = cmd.Output()
	if err != nil || string(out) != "renamed bar\n/tmp\n" {
		t.Fatalf("args/env/dir: %q %v", out, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err = CommandContext(ctx, env, "sleep", "60").Run()
	if !errors.As(err, &ee) || ee.Code != 128+15 {
		t.Fatalf("cancelled command: %v", err)
	}
}

func TestProcessProxyWriteSignalResizeTerminate(t *testing.T) {
	env := dial(t, startExecutor(t, nil).url, Config{})
	ctx := ctxT(t)
	p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", `trap 'echo usr1' USR1; read x; echo got:$x; read y || echo eof; while :; do sleep 0.01; done`}, Env: testEnv, PipeStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := p.Write(ctx, []byte("hi\n")); err != nil || st != protocol.WriteAccepted {
		t.Fatalf("%v %v", st, err)
	}
	if err := p.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	for !strings.Contains(out.String(), "eof") {
		out.Write((<-p.Events()).Data)
	}
	if err := p.Signal(ctx, protocol.SignalUser1); err != nil {
		t.Fatal(err)
	}
	for !strings.Contains(out.String(), "usr1") {
		out.Write((<-p.Events()).Data)
	}
	if err := p.Resize(ctx, 10, 10); err == nil {
		t.Fatal("resize of a pipe process succeeded")
	}
	if running, err := p.Terminate(ctx); err != nil || !running {
		t.Fatalf("%v %v", running, err)
	}
	res, err := p.Wait(ctx)
	if err != nil || res.ExitCode != 128+15 {
		t.Fatalf("%+v %v", res, err)
	}
}

func TestDialWSAndStdio(t *testing.T) {
	srv, _ := executor.NewServer(executor.DefaultConfig())
	l, err := srv.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := dial(t, l.URL(), Config{})
	out, err := Command(env, "echo", "ws").Output()
	if err != nil || string(out) != "ws\n" {
		t.Fatalf("%q %v", out, err)
	}

	bin, err := peers.BuildOutpost(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env = dial(t, "stdio://"+bin, Config{})
	out, err = Command(env, "echo", "stdio").Output()
	if err != nil || string(out) != "stdio\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestDialRejectsUnknownSchemes(t *testing.T) {
	for _, u := range []string{"http://x", "tcp://nohostport", "unix://relative", "tcp://h:1#short"} {
		if _, err := Dial(ctxT(t), u, Config{Key: newKey(t)}); err == nil {
			t.Errorf("%s accepted", u)
		}
	}
}
