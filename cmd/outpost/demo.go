package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/sandbox"
)

// cmdDemo runs the main job on an embedded default: a relay and an
// executor in this process on loopback, and a client that reaches the
// executor through the relay with end-to-end Noise, runs a few commands
// (one streaming, one sandbox denial, one timeout) and prints what came
// back with timings. Keys are ephemeral; the relay's token database lives
// in a temporary directory removed at the end.
func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", `echo "hello from $(uname -s) pid $$"; echo "to stderr" >&2; exit 3`}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}
	t0 := time.Now()
	dir, err := os.MkdirTemp("", "outpost-demo")
	if err != nil {
		return fail(err)
	}
	defer os.RemoveAll(dir)

	// The relay.
	relayKey, _ := identity.Generate()
	tokens, err := relay.OpenStore(filepath.Join(dir, "relay.db"))
	if err != nil {
		return fail(err)
	}
	rs, err := relay.NewServer(relay.Config{Key: relayKey.Keypair(), Tokens: tokens})
	if err != nil {
		return fail(err)
	}
	rl, err := rs.Listen("127.0.0.1:0")
	if err != nil {
		return fail(err)
	}
	defer rl.Close()
	relayURL := "outpost://" + rl.Addr().String() + "#" + relayKey.PublicKey().Fingerprint()
	fmt.Fprintf(stdout, "relay     %s\n", relayURL)

	// An executor that joins it.
	joinToken, _, err := tokens.Create(relay.TokenJoin, relay.CreateOptions{Uses: 1})
	if err != nil {
		return fail(err)
	}
	execKey, _ := identity.Generate()
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		return fail(err)
	}
	joinCtx, stopJoin := context.WithCancel(ctx)
	joined := make(chan struct{}, 1)
	joinDone := make(chan error, 1)
	go func() {
		joinDone <- srv.Join(joinCtx, executor.JoinConfig{RelayURL: relayURL, Key: execKey.Keypair(), ID: "demo", Token: joinToken,
			Joined: func() { joined <- struct{}{} }})
	}()
	defer func() {
		stopJoin()
		<-joinDone
		srv.Shutdown(context.Background())
	}()
	select {
	case <-joined:
	case err := <-joinDone:
		return fail(fmt.Errorf("joining the relay: %w", err))
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	fmt.Fprintf(stdout, "executor  demo, key %s, joined\n", execKey.PublicKey().Fingerprint())

	// A client, through the relay.
	clientToken, _, err := tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: "demo"})
	if err != nil {
		return fail(err)
	}
	clientKey, _ := identity.Generate()
	t1 := time.Now()
	env, err := client.Dial(ctx, relayURL, client.Config{Key: clientKey, Executor: "demo", Token: clientToken, Pin: execKey.PublicKey().Fingerprint()})
	if err != nil {
		return fail(err)
	}
	defer env.Close()
	fmt.Fprintf(stdout, "client    session %s through the relay (Noise IK end to end), connected in %s\n\n", env.SessionID(), time.Since(t1).Round(time.Microsecond))
	cwd, _ := os.Getwd()

	// 1. The command.
	fmt.Fprintf(stdout, "$ %q\n", argv)
	start := time.Now()
	p, err := env.Start(ctx, protocol.ExecParams{Argv: argv, Cwd: "file://" + cwd, EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore}})
	if err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "stdout: %q\nstderr: %q\nexit code %d in %s\n\n", res.Stdout, res.Stderr, res.ExitCode, time.Since(start).Round(time.Microsecond))

	// 2. Streaming output, as it arrives.
	fmt.Fprintln(stdout, "$ streaming: three ticks 100 ms apart")
	start = time.Now()
	p, err = env.Start(ctx, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "for i in 1 2 3; do echo tick $i; sleep 0.1; done"}, EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore}})
	if err != nil {
		return fail(err)
	}
	for ev := range p.Events() {
		if ev.Kind == client.EventOutput {
			fmt.Fprintf(stdout, "  +%3dms %s", time.Since(start).Milliseconds(), ev.Data)
		}
	}
	fmt.Fprintln(stdout)

	// 3. A sandbox denial.
	fmt.Fprintln(stdout, "$ sandboxed (workspace-write): write outside the workspace")
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
		fmt.Fprintf(stdout, "  skipped: %v\n\n", err)
	} else {
		outside, err := os.MkdirTemp("/var/tmp", "outpost-demo-outside")
		if err != nil {
			outside = "/usr"
		} else {
			defer os.RemoveAll(outside)
		}
		r, err := client.Exec(ctx, env, client.ExecRequest{Argv: []string{"/bin/sh", "-c", "echo inside > workspace.txt && echo wrote the workspace; echo x > " + outside + "/escape.txt"}, Cwd: dir, InheritEnv: true, Sandbox: map[string]any{"mode": "workspace-write"}})
		var denied *client.SandboxDeniedError
		fmt.Fprintf(stdout, "  denied=%v exit=%d in %s\n  output: %q\n\n", errors.As(err, &denied), r.ExitCode, r.Duration.Round(time.Microsecond), r.Output.String())
	}

	// 4. A timeout.
	fmt.Fprintln(stdout, "$ sleep 30 with a 300 ms timeout")
	r, err := client.Exec(ctx, env, client.ExecRequest{Argv: []string{"sleep", "30"}, InheritEnv: true, Timeout: 300 * time.Millisecond})
	var to *client.TimeoutError
	fmt.Fprintf(stdout, "  timed out=%v exit=%d in %s\n\n", errors.As(err, &to), r.ExitCode, r.Duration.Round(time.Millisecond))
	fmt.Fprintf(stdout, "demo done in %s\n", time.Since(t0).Round(time.Millisecond))
	return 0
}
