package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/internal/tracing"
	"github.com/outpost-exec/outpost/local"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

type envFlags []string

func (e *envFlags) String() string     { return strings.Join(*e, ",") }
func (e *envFlags) Set(v string) error { *e = append(*e, v); return nil }

func cmdExec(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost exec", flag.ContinueOnError)
	fs.SetOutput(stderr)
	rf := addRemoteFlags(fs) // none given: this machine
	mode := fs.String("sandbox", "", "sandbox: read-only, workspace-write or full-access (default: none)")
	flagChoices(fs, "sandbox", sandboxModes...)
	network := fs.Bool("network", false, "allow network access in the sandbox")
	cwd := fs.String("cwd", "", "working directory on the executor (default: the current directory when local)")
	var envs envFlags
	fs.Var(&envs, "env", "K=V for the command's environment (repeatable; the executor's core variables are inherited)")
	timeout := fs.Duration("timeout", 0, "stop the command after this long (default: no timeout)")
	tty := fs.Bool("tty", false, "run on a pseudo-terminal, with this terminal in raw mode")
	jsonOut := fs.Bool("json", false, "write one JSON event per line instead of the command's output")
	offlineGrace := fs.Duration("offline-grace", 0, "through a relay: how long to keep resuming while the executor is reported offline (default 5s)")
	recovery := fs.Duration("reconnect-for", 0, "how long to keep trying to resume after the connection drops (default 25s)")
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	argv := fs.Args()
	if len(argv) == 0 {
		fmt.Fprintln(stderr, "usage: outpost exec [flags] -- CMD [ARGS...]")
		return exitUsage
	}
	where, err := rf.resolve()
	if err == nil {
		err = where.check()
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost exec:", err)
		return exitUsage
	}
	// A mistyped policy is a usage error, found before connecting.
	if *mode != "" {
		if _, err := sandbox.ParseMode(*mode); err != nil {
			fmt.Fprintln(stderr, "outpost exec: --sandbox:", err)
			return exitUsage
		}
	} else if *network {
		fmt.Fprintln(stderr, "outpost exec: --network applies to a sandbox: give --sandbox too")
		return exitUsage
	}
	env := map[string]string{}
	for _, kv := range envs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || k == "" {
			fmt.Fprintf(stderr, "outpost exec: --env %q: want K=V\n", kv)
			return exitUsage
		}
		env[k] = v
	}
	if *tty {
		// As ssh and docker exec -t do: the terminal's type, and the
		// user's locale (ssh's SendEnv habit), unless --env set them.
		for _, kv := range os.Environ() {
			k, v, _ := strings.Cut(kv, "=")
			if k == "TERM" || k == "COLORTERM" || k == "LANG" || strings.HasPrefix(k, "LC_") {
				if _, set := env[k]; !set {
					env[k] = v
				}
			}
		}
	}
	var sandboxPolicy any
	if *mode != "" {
		sandboxPolicy = map[string]any{"mode": *mode, "network": *network}
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	url := where.URL
	dialCfg := client.Config{ClientName: "outpost-exec", OfflineGrace: *offlineGrace, RecoveryTimeout: *recovery}
	// Tracing, when OTEL_EXPORTER_OTLP_ENDPOINT is set: one span for this
	// run, under $TRACEPARENT if a caller (a CI job, an agent) passes one.
	tp, flushTraces, err := tracing.FromEnv(ctx, "outpost-exec")
	if err != nil {
		fmt.Fprintln(stderr, "outpost exec: tracing off:", err)
	} else if tp != nil {
		defer flushSpans(flushTraces)
		dialCfg.TracerProvider = tp
		ctx = tracing.Extract(ctx, os.Getenv("TRACEPARENT"), os.Getenv("TRACESTATE"))
		var span trace.Span
		ctx, span = tracing.Tracer(tp).Start(ctx, "outpost exec", trace.WithAttributes(attribute.String("process.executable.name", filepath.Base(argv[0]))))
		defer span.End()
	}
	dialCfg.Executor, dialCfg.Token = where.Executor, where.Token
	pinning(&dialCfg, where.AcceptNew, stderr)
	if url == "" && *cwd == "" {
		*cwd, _ = os.Getwd()
	}
	params := protocol.ExecParams{Argv: argv, Cwd: *cwd, Env: env, EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore}, Sandbox: sandboxPolicy, Tty: *tty}
	stdinIsTerm := isTerminal(os.Stdin)
	params.PipeStdin = !*tty // like ssh: stdin is forwarded; EOF closes the remote stdin
	if *tty && stdinIsTerm {
		if rows, cols, err := termSize(os.Stdin); err == nil {
			params.Rows, params.Cols = rows, cols
		}
	}
	var environment client.Environment
	var p *client.Process
	if url == "" {
		environment, err = local.New(ctx)
		if err != nil {
			fmt.Fprintf(stderr, "outpost exec: cannot reach the executor: %v\n", err)
			return dialExit(err)
		}
		defer environment.Close()
		if p, err = environment.Start(ctx, params); err != nil {
			return startFailure(err, stderr)
		}
	} else {
		// initialize and process/start back to back (in the handshake's
		// first message, as early data, to a pinned direct executor).
		var r *client.Remote
		r, p, err = client.DialStart(ctx, url, dialCfg, params)
		if r == nil {
			fmt.Fprintf(stderr, "outpost exec: cannot reach the executor: %v\n", err)
			return dialExit(err)
		}
		environment = r
		// At exit, everything the command wrote has been delivered (its
		// closed event comes last): the connection is closed without
		// waiting — through a relay, Close would wait a round trip for the
		// relay to echo the end of the stream — and the process's exit
		// ends whatever is left of it.
		defer func() { go r.Close() }()
		if err != nil {
			return startFailure(err, stderr)
		}
	}
	emit := jsonEmitter(stdout, *jsonOut)
	emit(map[string]any{"type": "start", "processId": p.ID(), "pid": p.Pid()})

	// Local terminal: raw mode for --tty, window size changes forwarded.
	if *tty && stdinIsTerm {
		restore, err := makeRaw(os.Stdin)
		if err == nil {
			defer restore()
		}
		stopWatch := watchResize(func() {
			if rows, cols, err := termSize(os.Stdin); err == nil {
				p.Resize(ctx, rows, cols)
			}
		})
		defer stopWatch()
	}
	// stdin: forwarded; EOF closes the remote stdin.
	if params.PipeStdin || *tty {
		go forwardStdin(ctx, p, *tty)
	}
	// Ctrl-C and SIGTERM go to the remote process group.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	go func() {
		names := map[os.Signal]protocol.Signal{syscall.SIGINT: protocol.SignalInterrupt, syscall.SIGTERM: protocol.SignalTerminate, syscall.SIGHUP: protocol.SignalHangup, syscall.SIGQUIT: protocol.SignalQuit}
		interrupts := 0
		for s := range sigs {
			if s != syscall.SIGINT {
				p.Signal(ctx, names[s])
				continue
			}
			// As ssh and kubectl users expect: a command that ignores
			// Ctrl-C is terminated by the second (TERM to its group, KILL
			// after the executor's grace), killed by the third.
			switch interrupts++; interrupts {
			case 1:
				p.Signal(ctx, protocol.SignalInterrupt)
			case 2:
				fmt.Fprintln(stderr, "\r\noutpost exec: terminating the command (TERM, then KILL after the grace); Ctrl-C again to kill it now")
				p.Terminate(ctx)
			default:
				p.Signal(ctx, protocol.SignalKill)
			}
		}
	}()
	var deadline <-chan time.Time
	if *timeout > 0 {
		t := time.NewTimer(*timeout)
		defer t.Stop()
		deadline = t.C
	}
	timedOut := false
	code, sig, denied, limit := 0, 0, false, ""
	for {
		select {
		case ev, ok := <-p.Events():
			if !ok {
				if err := p.Err(); err != nil {
					fmt.Fprintf(stderr, "outpost exec: lost the executor: %v\n", err)
					emit(map[string]any{"type": "error", "error": err.Error()})
					return exitTransport
				}
				exit := map[string]any{"type": "exit", "exitCode": code, "signal": sig, "timedOut": timedOut, "sandboxDenied": denied}
				if limit != "" {
					exit["limit"] = limit
				}
				emit(exit)
				if denied {
					fmt.Fprintln(stderr, "outpost exec: the command failed, likely denied by the sandbox")
				}
				switch limit {
				case protocol.LimitMemory:
					fmt.Fprintln(stderr, "outpost exec: the command ran out of memory: it reached the executor's --memory-max, and the OOM killer took it")
				case protocol.LimitPids:
					fmt.Fprintln(stderr, "outpost exec: the command reached the executor's --pids-max: some of its forks were refused")
				}
				if timedOut {
					fmt.Fprintf(stderr, "outpost exec: timed out after %s\n", *timeout)
					return exitTimeout
				}
				return code
			}
			switch ev.Kind {
			case client.EventOutput:
				if *jsonOut {
					m := map[string]any{"type": "output", "stream": string(ev.Stream), "seq": ev.Seq}
					if utf8.Valid(ev.Data) {
						m["text"] = string(ev.Data)
					} else {
						m["base64"] = base64.StdEncoding.EncodeToString(ev.Data)
					}
					emit(m)
				} else if ev.Stream == protocol.StreamStderr {
					stderr.Write(ev.Data)
				} else {
					stdout.Write(ev.Data)
				}
			case client.EventExited:
				code, sig, denied, limit = int(ev.ExitCode), int(ev.Signal), ev.SandboxDenied, ev.Limit
			case client.EventFailed:
				fmt.Fprintf(stderr, "outpost exec: %v\n", ev.Err)
				emit(map[string]any{"type": "error", "error": ev.Err.Error()})
				return exitTransport
			}
		case <-deadline:
			timedOut = true
			p.Terminate(ctx)
			deadline = nil
		}
	}
}

// startFailure reports a refused start; its exit status is by the
// executor's error kind (startExit).
func startFailure(err error, stderr io.Writer) int {
	fmt.Fprintf(stderr, "outpost exec: %v\n", err)
	return startExit(err)
}

func jsonEmitter(w io.Writer, on bool) func(map[string]any) {
	if !on {
		return func(map[string]any) {}
	}
	enc := json.NewEncoder(w)
	return func(m map[string]any) { enc.Encode(m) }
}

// forwardStdin copies this process's stdin to p's. Process.Write waits
// while the command reads slower than stdin delivers, so any amount
// passes with bounded memory; after the last byte (or a failure, which is
// reported) p's stdin is closed, so the command sees EOF and never waits
// for input that will not come.
func forwardStdin(ctx context.Context, p *client.Process, tty bool) {
	r := bufio.NewReaderSize(os.Stdin, 64<<10)
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			st, werr := p.Write(ctx, append([]byte(nil), buf[:n]...))
			if st == protocol.WriteStdinClosed || st == protocol.WriteUnknownProcess {
				return // the command closed its stdin or is gone: the rest is not wanted
			}
			if werr != nil {
				// Once the command has ended (and the connection with
				// it) a failed write is no news.
				if ctx.Err() == nil && !closed(p.Done()) {
					fmt.Fprintf(os.Stderr, "outpost exec: forwarding stdin: %v\n", werr)
					p.CloseStdin(ctx)
				}
				return
			}
		}
		if err != nil {
			if err != io.EOF && ctx.Err() == nil {
				fmt.Fprintf(os.Stderr, "outpost exec: reading stdin: %v\n", err)
			}
			p.CloseStdin(ctx)
			return
		}
	}
}

// closed reports whether ch is closed.
func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
