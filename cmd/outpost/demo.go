package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
)

// cmdDemo runs the main job on an embedded default: an executor in this
// process listening on loopback, and a client that reaches it over the
// encrypted path (Noise IK + yamux + msgpack), runs a real command and
// prints what came back. Keys are ephemeral; nothing is written to disk.
func cmdDemo(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		return 2
	}
	argv := fs.Args()
	if len(argv) == 0 {
		argv = []string{"/bin/sh", "-c", `echo "hello from $(uname -s) pid $$"; echo "to stderr" >&2; exit 3`}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fail := func(err error) int {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}

	execKey, err := identity.Generate()
	if err != nil {
		return fail(err)
	}
	clientKey, err := identity.Generate()
	if err != nil {
		return fail(err)
	}
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		return fail(err)
	}
	l, err := srv.ListenNative("tcp://127.0.0.1:0", executor.NativeOptions{Key: execKey.Keypair()})
	if err != nil {
		return fail(err)
	}
	defer func() {
		l.Close()
		srv.Shutdown(ctx)
	}()
	url := l.URL() + "#" + execKey.PublicKey().Fingerprint()
	fmt.Fprintf(stdout, "executor listening on %s (in-process)\n", url)

	env, err := client.Dial(ctx, url, client.Options{Key: clientKey})
	if err != nil {
		return fail(err)
	}
	defer env.Close()
	fmt.Fprintf(stdout, "session %s over Noise IK + yamux\n$ %q\n", env.SessionID(), argv)
	cwd, _ := os.Getwd()
	start := time.Now()
	p, err := env.Start(ctx, protocol.ExecParams{
		Argv:      argv,
		Cwd:       "file://" + cwd,
		EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore},
	})
	if err != nil {
		return fail(fmt.Errorf("start: %w", err))
	}
	res, err := p.Wait(ctx)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stdout, "stdout: %q\nstderr: %q\nexit code %d in %s\n", res.Stdout, res.Stderr, res.ExitCode, time.Since(start).Round(time.Microsecond))
	return 0
}
