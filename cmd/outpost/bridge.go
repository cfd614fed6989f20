package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/bridge"
	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/transport"
)

const bridgeUsage = `usage: outpost bridge (--target tcp://HOST:PORT#<fp> | --relay outpost://HOST:PORT#<fp> --executor ID --token T) [--listen ws://127.0.0.1:0 | --listen stdio]

Serves codex's exec-server protocol (JSON-RPC over WebSocket, as "outpost
executor serve --listen ws://" does, or over stdin and stdout with
--listen stdio, as a program codex starts) and forwards every request to
one executor over outpost's native transport: Noise IK end to end with the
executor's key pinned, directly or through a relay, resumed across
dropped connections and relay restarts. Point codex at the printed URL
(CODEX_EXEC_SERVER_URL, or an environments.toml entry), or name
"outpost bridge --listen stdio ..." as the environment's program. A
--listen address other than loopback needs a token (--ws-auth
capability-token, or OUTPOST_CONNECTION_TOKEN).
`

// cmdBridge runs `outpost bridge`.
func cmdBridge(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost bridge", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), bridgeUsage, "\nFlags:\n")
		fs.PrintDefaults()
	}
	rf := addRemoteFlags(fs)
	listen := fs.String("listen", "ws://127.0.0.1:0", "where codex connects: ws://IP:PORT (not loopback: needs a token), or stdio (codex starts the bridge as its program)")
	wsAuth := addWSAuthFlags(fs)
	detachedTTL := fs.Duration("detached-ttl", bridge.DefaultDetachedTTL, "how long a disconnected codex session (its upstream connection and processes) is kept for resumption")
	maxSessions := fs.Int("max-sessions", bridge.DefaultMaxSessions, "codex sessions, attached or detached (the longest-detached makes room)")
	maxConns := fs.Int("max-connections", bridge.DefaultMaxConnections, "codex WebSocket connections")
	offlineGrace := fs.Duration("offline-grace", 0, "through a relay: how long to keep resuming while the executor is reported offline (default 5s)")
	recovery := fs.Duration("reconnect-for", 0, "how long to keep trying to resume after the upstream connection drops (default 25s)")
	var lf logFlags
	lf.register(fs)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "outpost bridge: "+format+"\n", a...)
		return exitUsage
	}
	if fs.NArg() > 0 {
		return usageErr("unexpected argument %q", fs.Arg(0))
	}
	// The executor, as outpost exec finds it: --relay with --executor, or
	// --target, from flags, the environment or the config file.
	where, err := rf.resolve()
	if err == nil {
		err = where.check()
	}
	if err != nil {
		return usageErr("%v", err)
	}
	url := where.URL
	var executorURL transport.URL
	dialCfg := client.Config{ClientName: "outpost-bridge", OfflineGrace: *offlineGrace, RecoveryTimeout: *recovery}
	pinning(&dialCfg, where.AcceptNew, stderr)
	switch {
	case where.Executor != "":
		u, err := transport.ParseURL(where.Relay, transport.SchemeRelay, transport.SchemeRelayWS)
		if err != nil {
			return usageErr("--relay: %v", err)
		}
		executorURL = u
		dialCfg.Executor, dialCfg.Token = where.Executor, where.Token
	case url == "":
		return usageErr("no executor: give --target tcp://HOST:PORT#<fingerprint> (or $OUTPOST_TARGET), or --relay URL --executor ID")
	default:
		u, err := transport.ParseURL(url, transport.SchemeTCP, transport.SchemeUnix)
		if err != nil {
			return usageErr("target: %v (want tcp://HOST:PORT#<fingerprint> or unix:///path#<fingerprint>, the native transport; a relay is --relay with --executor)", err)
		}
		executorURL = u
	}

	lu, err := executor.ParseListenURL(*listen)
	if err != nil || lu.Scheme != transport.SchemeWS && lu.Scheme != transport.SchemeStdio {
		return usageErr("invalid --listen URL `%s`; expected `ws://IP:PORT` or `stdio`", *listen)
	}
	auth, err := wsAuth.resolve()
	if err != nil {
		return usageErr("%v", err)
	}
	stdio := lu.Scheme == transport.SchemeStdio
	if !stdio && !netip.MustParseAddrPort(lu.Addr).Addr().Unmap().IsLoopback() && !auth.Enabled() {
		return usageErr("refusing to listen on %s, which is not loopback, without a token (--ws-auth capability-token or OUTPOST_CONNECTION_TOKEN): anyone who reaches it could run commands on the executor", *listen)
	}
	log, err := lf.build(stderr)
	if err != nil {
		return usageErr("%v", err)
	}
	defer log.Sync()

	dial := func(ctx context.Context, clientName string) (*client.Remote, error) {
		c := dialCfg
		if clientName != "" {
			c.ClientName += " for " + clientName
		}
		return client.Dial(ctx, url, c)
	}
	// Reach the executor once now, so a wrong URL, pin or token fails here
	// rather than in codex.
	pctx, cancel := context.WithTimeout(context.Background(), bridge.DefaultDialTimeout)
	probe, err := dial(pctx, "")
	if err == nil {
		_, err = probe.Info(pctx)
		probe.Close()
	}
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "outpost bridge: cannot reach the executor: %v\n", err)
		return dialExit(err)
	}

	b, err := bridge.New(bridge.Config{Dial: dial, Token: auth.Token, TokenSHA256: auth.TokenSHA256, Logger: log, DetachedTTL: *detachedTTL,
		MaxSessions: *maxSessions, MaxConnections: *maxConns})
	if err != nil {
		return usageErr("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if stdio {
		// stdout is codex's channel: nothing else may be written there
		// (the logs go to stderr). The bridge ends with stdin.
		log.Info("bridge serving stdio", zap.String("executor", executorURL.Base()), zap.String("executor_id", dialCfg.Executor))
		b.ServeStdio(ctx, os.Stdin, stdoutCloser{stdout})
		closeBridge(b, log)
		return 0
	}
	l, err := b.Listen(lu.Addr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost bridge: listen:", err)
		return 1
	}
	fmt.Fprintln(stdout, l.URL())
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	log.Info("bridge listening", zap.String("url", l.URL()), zap.String("executor", executorURL.Base()),
		zap.String("executor_id", dialCfg.Executor), zap.Bool("token", auth.Enabled()))
	<-ctx.Done()
	l.Close()
	closeBridge(b, log)
	return 0
}

// closeBridge ends every session (terminating its processes), at most
// 15 s.
func closeBridge(b *bridge.Bridge, log *zap.Logger) {
	log.Info("shutting down: terminating the sessions' processes")
	done := make(chan struct{})
	go func() { b.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		log.Warn("shutdown took too long; exiting")
	}
}

// stdoutCloser is stdout as the bridge's stdio writer: closing it closes
// os.Stdout when that is what it is, so codex sees the end.
type stdoutCloser struct{ w io.Writer }

func (n stdoutCloser) Write(p []byte) (int, error) { return n.w.Write(p) }
func (n stdoutCloser) Close() error {
	if c, ok := n.w.(io.Closer); ok {
		return c.Close()
	}
	return nil
}
