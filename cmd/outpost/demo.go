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
	"github.com/outpost-exec/outpost/protocol"
)

// cmdDemo runs the main job on an embedded default: an executor in this
// process, listening on loopback, and a client that runs a real command
// through it and prints what came back.
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

	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}
	l, err := srv.ListenWS("127.0.0.1:0", executor.WSOptions{})
	if err != nil {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}
	defer func() {
		l.Close()
		srv.Shutdown(ctx)
	}()
	fmt.Fprintf(stdout, "executor listening on %s (in-process)\n", l.URL())

	sess, err := client.Connect(ctx, l.URL(), client.DialOptions{})
	if err != nil {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}
	defer sess.Close()
	fmt.Fprintf(stdout, "session %s\n$ %q\n", sess.ID(), argv)
	cwd, _ := os.Getwd()
	start := time.Now()
	p, err := sess.Start(ctx, protocol.ExecParams{
		Argv:      argv,
		Cwd:       "file://" + cwd,
		EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore},
	})
	if err != nil {
		fmt.Fprintln(stderr, "outpost demo: start:", err)
		return 1
	}
	res, err := p.Wait(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "outpost demo:", err)
		return 1
	}
	fmt.Fprintf(stdout, "stdout: %q\nstderr: %q\nexit code %d in %s\n", res.Stdout, res.Stderr, res.ExitCode, time.Since(start).Round(time.Microsecond))
	return 0
}
