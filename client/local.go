package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/transport"
)

// Local returns an Environment that runs processes on this machine with
// an in-process executor. It speaks the native protocol over an in-memory
// pipe (no network, no encryption needed), so it behaves exactly like a
// remote executor. Close stops the executor and its processes.
func Local(ctx context.Context) (*LocalEnvironment, error) {
	return LocalWith(ctx, executor.DefaultConfig())
}

// LocalWith is Local with an executor configuration.
func LocalWith(ctx context.Context, cfg executor.Config) (*LocalEnvironment, error) {
	srv, err := executor.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	l := &LocalEnvironment{srv: srv}
	srvCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	dial := func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		a, b := net.Pipe()
		sess, err := transport.MuxServer(b, transport.DefaultMuxConfig())
		if err != nil {
			return nil, err
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			srv.ServeMux(srvCtx, sess, 0)
		}()
		return muxConn(a, transport.DefaultMuxConfig(), route)
	}
	r, err := newRemote(ctx, "local", dial, Config{NoResume: true, ClientName: "outpost-local"}.withDefaults())
	if err != nil {
		stop()
		return nil, err
	}
	l.Remote = r
	return l, nil
}

// LocalEnvironment is the in-process Environment.
type LocalEnvironment struct {
	*Remote
	srv  *executor.Server
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// Close ends the connection, then terminates every process.
func (l *LocalEnvironment) Close() error {
	err := l.Remote.Close()
	l.stop()
	l.wg.Wait()
	l.srv.Shutdown(context.Background())
	return err
}

// ErrDisabled is returned by a provider configured with "none".
var ErrDisabled = errors.New("exec environment is disabled (OUTPOST_EXEC_SERVER_URL=none)")

// EnvironmentProvider chooses where processes run from configuration, as
// codex does with CODEX_EXEC_SERVER_URL: no URL → this machine (Local); a
// URL → that executor (Dial); "none" → ErrDisabled.
type EnvironmentProvider struct {
	URL string
	// Config configures Dial (see Config for its defaults).
	Config Config
}

// ProviderFromEnv reads OUTPOST_EXEC_SERVER_URL, falling back to
// CODEX_EXEC_SERVER_URL.
func ProviderFromEnv() EnvironmentProvider {
	url, ok := os.LookupEnv("OUTPOST_EXEC_SERVER_URL")
	if !ok {
		url = os.Getenv("CODEX_EXEC_SERVER_URL")
	}
	return EnvironmentProvider{URL: strings.TrimSpace(url)}
}

// Environment opens the configured environment.
func (p EnvironmentProvider) Environment(ctx context.Context) (Environment, error) {
	switch p.URL {
	case "":
		return Local(ctx)
	case "none":
		return nil, ErrDisabled
	}
	r, err := Dial(ctx, p.URL, p.Config)
	if err != nil {
		return nil, fmt.Errorf("exec environment %s: %w", p.URL, err)
	}
	return r, nil
}
