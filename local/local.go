// Package local runs processes on this machine through an in-process
// executor, behind the same client.Environment API as a remote one.
//
// It lives outside package client because the executor brings the
// sandbox, the process engine, PTYs and metrics with it: a program that
// only reaches remote executors imports client and links none of them.
package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/transport"
)

// New returns an Environment that runs processes on this machine with an
// in-process executor. It speaks the native protocol over an in-memory
// pipe (no network, no encryption needed), so it behaves exactly like a
// remote executor. Close stops the executor and its processes.
func New(ctx context.Context) (*Environment, error) {
	return NewWith(ctx, executor.DefaultConfig())
}

// NewWith is New with an executor configuration.
func NewWith(ctx context.Context, cfg executor.Config) (*Environment, error) {
	srv, err := executor.NewServer(cfg)
	if err != nil {
		return nil, err
	}
	l := &Environment{srv: srv}
	srvCtx, stop := context.WithCancel(context.Background())
	l.stop = stop
	dial := func(context.Context) (net.Conn, error) {
		a, b := net.Pipe()
		sess, err := transport.MuxServer(b, transport.DefaultMuxConfig())
		if err != nil {
			a.Close()
			return nil, err
		}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			srv.ServeMux(srvCtx, sess, 0)
		}()
		return a, nil
	}
	// A pipe cannot drop, so there is nothing to resume.
	r, err := client.DialConn(ctx, "local", dial, client.Config{NoResume: true, ClientName: "outpost-local"})
	if err != nil {
		stop()
		l.wg.Wait()
		srv.Shutdown(context.Background())
		return nil, err
	}
	l.Remote = r
	return l, nil
}

// Environment is the in-process client.Environment.
type Environment struct {
	*client.Remote
	srv  *executor.Server
	stop context.CancelFunc
	wg   sync.WaitGroup
}

// Close ends the connection, then terminates every process.
func (l *Environment) Close() error {
	err := l.Remote.Close()
	l.stop()
	l.wg.Wait()
	l.srv.Shutdown(context.Background())
	return err
}

// ErrDisabled is returned by a provider configured with "none".
var ErrDisabled = errors.New("exec environment is disabled (OUTPOST_EXEC_SERVER_URL=none)")

// EnvironmentProvider chooses where processes run from configuration, as
// codex does with CODEX_EXEC_SERVER_URL: no URL → this machine (New); a
// URL → that executor (client.Dial); "none" → ErrDisabled.
type EnvironmentProvider struct {
	URL string
	// Config configures client.Dial (see client.Config for its defaults).
	Config client.Config
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
func (p EnvironmentProvider) Environment(ctx context.Context) (client.Environment, error) {
	switch p.URL {
	case "":
		return New(ctx)
	case "none":
		return nil, ErrDisabled
	}
	r, err := client.Dial(ctx, p.URL, p.Config)
	if err != nil {
		return nil, fmt.Errorf("exec environment %s: %w", p.URL, err)
	}
	return r, nil
}
