package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/local"
	"github.com/outpost-exec/outpost/mcpserver"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// cmdMcp is `outpost mcp`: the Model Context Protocol server
// (package mcpserver) for the executors named as outpost exec names
// them, over stdio (what a desktop agent launches) or Streamable HTTP.
func cmdMcp(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost mcp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRemoteFlags(fs)
	listen := fs.String("listen", "stdio", "stdio, or http://HOST:PORT/PATH for Streamable HTTP (loopback unless --http-token-file is given)")
	tokenFile := fs.String("http-token-file", "", "file holding the bearer token HTTP clients must send (default $OUTPOST_MCP_TOKEN); required off loopback")
	workspace := fs.String("workspace", "", "directory on the executor for relative paths and workspace-write (default: the executor's working directory; this directory when local)")
	mode := fs.String("sandbox", string(sandbox.ModeWorkspaceWrite), "sandbox of a command that names none: read-only, workspace-write or full-access")
	flagChoices(fs, "sandbox", sandboxModes...)
	allow := fs.String("allow-sandbox", "read-only,workspace-write", "comma-separated sandbox modes a model may ask for (full-access only if listed)")
	network := fs.Bool("network", false, "let sandboxed commands use the network when they ask")
	readOnly := fs.Bool("read-only", false, "no write_file or edit_file, and every command in the read-only sandbox")
	maxHandles := fs.Int("max-handles", mcpserver.DefaultMaxHandles, "running processes (start handles) per MCP session")
	maxSessions := fs.Int("max-sessions", mcpserver.DefaultMaxSessions, "MCP sessions open at once (HTTP); a new one past it gets 503")
	maxTimeout := fs.Duration("max-timeout", mcpserver.DefaultMaxTimeout, "the longest timeout a run may ask for")
	var lf logFlags
	lf.register(fs)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "outpost mcp: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	log, err := lf.build(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitUsage
	}
	where, err := rf.resolve()
	if err != nil {
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitUsage
	}
	cfg := mcpserver.Config{
		Workspace: *workspace, DefaultSandbox: *mode, AllowedSandboxes: splitList(*allow),
		Network: *network, ReadOnly: *readOnly, MaxHandles: *maxHandles, MaxSessions: *maxSessions, MaxTimeout: *maxTimeout,
		Log: log, Version: shortVersion(),
	}
	if err := mcpExecutors(&cfg, where, stderr); err != nil {
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitUsage
	}
	if where.URL == "" && cfg.Workspace == "" {
		cfg.Workspace, _ = os.Getwd()
	}
	srv, err := mcpserver.New(cfg)
	if err != nil {
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitUsage
	}
	defer srv.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *listen == "stdio" {
		// stdout is the protocol's: nothing else may be written there.
		if err := srv.ServeStdio(ctx, os.Stdin, os.Stdout); err != nil {
			fmt.Fprintln(stderr, "outpost mcp:", err)
			return exitTransport
		}
		return 0
	}
	return serveMcpHTTP(ctx, srv, *listen, *tokenFile, log, stdout, stderr)
}

// mcpExecutors fills cfg's executors from where: one per --executor id
// through the relay (several, comma-separated), the --target executor, or
// this machine.
func mcpExecutors(cfg *mcpserver.Config, where remote, stderr io.Writer) error {
	dialCfg := client.Config{ClientName: "outpost-mcp", Token: where.Token}
	pinning(&dialCfg, where.AcceptNew, stderr)
	switch {
	case where.URL == "":
		cfg.Executors = []mcpserver.Executor{{ID: "local", Dial: func(ctx context.Context) (client.Environment, error) { return local.New(ctx) }}}
	case where.Relay != "":
		for _, id := range splitList(where.Executor) {
			one := where
			one.Executor = id
			if err := one.check(); err != nil {
				return err
			}
			c := dialCfg
			c.Executor = id
			cfg.Executors = append(cfg.Executors, mcpserver.Executor{ID: id, Dial: func(ctx context.Context) (client.Environment, error) { return client.Dial(ctx, where.Relay, c) }})
		}
		if len(cfg.Executors) == 0 {
			return &usageError{"--executor: name at least one executor"}
		}
		relayURL := where.Relay
		cfg.List = func(ctx context.Context) ([]protocol.RelayExecutor, error) {
			return client.ListExecutors(ctx, relayURL, dialCfg)
		}
	default:
		if err := where.check(); err != nil {
			return err
		}
		id := "target"
		if u, err := url.Parse(where.URL); err == nil && u.Host != "" {
			id = u.Host
		}
		cfg.Executors = []mcpserver.Executor{{ID: id, Dial: func(ctx context.Context) (client.Environment, error) { return client.Dial(ctx, where.URL, dialCfg) }}}
	}
	return nil
}

// splitList splits a comma-separated flag value, dropping blanks.
func splitList(s string) []string {
	var out []string
	for _, v := range strings.Split(s, ",") {
		if v = strings.TrimSpace(v); v != "" {
			out = append(out, v)
		}
	}
	return out
}

// serveMcpHTTP serves Streamable HTTP on listen until ctx ends, then
// shuts down: open requests get 5 s, every session's processes are
// terminated.
func serveMcpHTTP(ctx context.Context, srv *mcpserver.Server, listen, tokenFile string, log *zap.Logger, stdout, stderr io.Writer) int {
	u, err := url.Parse(listen)
	if err != nil || u.Scheme != "http" || u.Host == "" || u.User != nil || u.RawQuery != "" {
		fmt.Fprintf(stderr, "outpost mcp: --listen %q: want stdio or http://HOST:PORT/PATH\n", listen)
		return exitUsage
	}
	token := os.Getenv("OUTPOST_MCP_TOKEN")
	if tokenFile != "" {
		b, err := os.ReadFile(filepath.Clean(tokenFile))
		if err != nil {
			fmt.Fprintln(stderr, "outpost mcp: --http-token-file:", err)
			return exitUsage
		}
		token = strings.TrimSpace(string(b))
		if token == "" {
			fmt.Fprintf(stderr, "outpost mcp: --http-token-file %s is empty\n", tokenFile)
			return exitUsage
		}
	}
	host := u.Hostname()
	ip := net.ParseIP(host)
	loopback := host == "localhost" || (ip != nil && ip.IsLoopback())
	if !loopback && token == "" {
		fmt.Fprintf(stderr, "outpost mcp: --listen %s is not loopback: give a bearer token (--http-token-file or $OUTPOST_MCP_TOKEN), or listen on 127.0.0.1\n", listen)
		return exitUsage
	}
	ln, err := net.Listen("tcp", u.Host)
	if err != nil {
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitTransport
	}
	p := u.Path
	if p == "" {
		p = "/mcp"
	}
	mux := http.NewServeMux()
	mux.Handle(p, srv.HTTPHandler(mcpserver.HTTPOptions{Token: token}))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10}
	served := (&url.URL{Scheme: "http", Host: ln.Addr().String(), Path: p}).String()
	fmt.Fprintln(stdout, served)
	if token == "" {
		log.Warn("serving MCP without a bearer token: any local user may use it; give --http-token-file on a shared machine", zap.String("url", served))
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		fmt.Fprintln(stderr, "outpost mcp:", err)
		return exitTransport
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintln(stderr, "outpost mcp:", err)
	}
	return 0
}
