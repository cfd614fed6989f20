package client

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// DialStart sends process/start behind initialize without waiting for its
// answer; the executor runs it in order, and a warm start on the same
// connection works as before.
func TestDialStartPipelinesStartBehindInitialize(t *testing.T) {
	ex := startExecutor(t, nil)
	ctx := ctxT(t)
	cfg := Config{Key: newKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known")}
	for _, url := range []string{ex.url, ex.ln.URL()} { // pinned (IK), then first contact (XX)
		r, p, err := DialStart(ctx, url, cfg, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, Env: testEnv})
		if err != nil {
			t.Fatalf("%s: %v", url, err)
		}
		res, err := p.Wait(ctx)
		if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
			t.Fatalf("%s: %+v %v", url, res, err)
		}
		if r.SessionID() == "" {
			t.Fatal("no session id")
		}
		p2, err := r.Start(ctx, protocol.ExecParams{Argv: []string{"/bin/echo", "warm"}, Env: testEnv})
		if err != nil {
			t.Fatal(err)
		}
		if res, err := p2.Wait(ctx); err != nil || string(res.Stdout) != "warm\n" {
			t.Fatalf("warm start: %+v %v", res, err)
		}
		r.Close()
	}
	// A refused start leaves the connection up: the Remote is returned.
	r, p, err := DialStart(ctx, ex.url, cfg, protocol.ExecParams{Argv: []string{"/nonexistent/cmd"}, Env: testEnv})
	if r == nil || p != nil || err == nil {
		t.Fatalf("DialStart of a missing command: %v %v %v", r, p, err)
	}
	if _, err := r.Info(ctx); err != nil {
		t.Fatalf("the Remote of a refused start: %v", err)
	}
	r.Close()
}

// When initialize fails, the pipelined start fails with initialize's
// error, and the executor ran nothing.
func TestPipelinedStartAfterAFailedInitializeRunsNothing(t *testing.T) {
	ex := startExecutor(t, func(c *executor.Config, _ *executor.NativeConfig) { c.MaxSessions = 1 })
	ctx := ctxT(t)
	cfg := Config{Key: newKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known")}
	dial(t, ex.url, cfg) // holds the one session
	marker := filepath.Join(t.TempDir(), "ran")
	r, p, err := DialStart(ctx, ex.url, cfg, protocol.ExecParams{Argv: []string{"/bin/touch", marker}, Env: testEnv})
	if r != nil || p != nil || err == nil {
		t.Fatalf("DialStart past MaxSessions: %v %v %v", r, p, err)
	}
	if protocol.KindOf(err) != protocol.KindExhausted || !strings.Contains(err.Error(), "initialize") || !strings.Contains(err.Error(), "not run") {
		t.Fatalf("error %q (kind %q): want initialize's, exhausted", err, protocol.KindOf(err))
	}

	// What the executor answers the start itself, on the wire: refused,
	// naming initialize's failure, with its kind.
	dialFn, _, err := dialerFor(ex.url, cfg)
	if err != nil {
		t.Fatal(err)
	}
	c, err := dialFn(ctx, func(string, transport.Params, bool) {})
	if err != nil {
		t.Fatal(err)
	}
	defer c.close()
	init, err := c.rpc.Send(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "t", ProtocolVersion: protocol.Version})
	if err != nil {
		t.Fatal(err)
	}
	c.rpc.Notify(ctx, protocol.MethodInitialized, struct{}{})
	start, err := c.rpc.Send(ctx, protocol.MethodProcessStart, protocol.ExecParams{ProcessID: "p1", Argv: []string{"/bin/touch", marker}, Env: testEnv})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.launch(ctx); err != nil {
		t.Fatal(err)
	}
	ierr, serr := init.Wait(ctx, nil), start.Wait(ctx, nil)
	var pe *protocol.Error
	if !errors.As(serr, &pe) || pe.Code != protocol.CodeInvalidRequest || pe.Kind() != protocol.KindExhausted || !strings.Contains(pe.Message, "initialize failed") {
		t.Fatalf("initialize: %v; start: %v", ierr, serr)
	}
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the command ran: %v", err)
	}
}
