package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"path"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/outpost-exec/outpost/client"
)

// cpOperand is one side of a copy: a local path, or a path on an
// executor (EXECUTOR:PATH through the relay, or :PATH on --target).
type cpOperand struct {
	remote   bool
	executor string
	path     string
}

// parseOperand: "ID:/p" and ":/p" are remote; anything whose part before
// the first ':' holds a '/' (or that has no ':') is local.
func parseOperand(s string) cpOperand {
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.ContainsRune(s[:i], '/') {
		return cpOperand{path: s}
	}
	return cpOperand{remote: true, executor: s[:i], path: s[i+1:]}
}

func cmdCp(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost cp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, `usage: outpost cp [flags] SRC DST

EXECUTOR:PATH is on executor EXECUTOR, reached through --relay (or
$OUTPOST_RELAY) with --token (or $OUTPOST_TOKEN); :PATH is on the --target
executor (or $OUTPOST_TARGET, the config file). One side or both may be
remote: within one executor it copies by itself; between two, files stream
through here. Every file is checked end to end with sha256.

`)
		fs.PrintDefaults()
	}
	recursive := fs.Bool("r", false, "copy directories recursively")
	target := fs.String("target", "", "executor URL for :PATH operands (default $OUTPOST_TARGET or the config file)")
	relayURL := fs.String("relay", "", "relay URL for EXECUTOR:PATH operands (default $OUTPOST_RELAY or \"relay =\" in the config file)")
	token := fs.String("token", "", "client token for the relay (default $OUTPOST_TOKEN or \"token =\" in the config file; never printed)")
	mode := fs.String("sandbox", "", "judge the remote side by this sandbox mode (read-only, workspace-write, full-access)")
	quiet := fs.Bool("q", false, "no progress bar")
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	*relayURL, *token = orDefault(*relayURL, "OUTPOST_RELAY", "relay"), orDefault(*token, "OUTPOST_TOKEN", "token")
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	src, dst := parseOperand(fs.Arg(0)), parseOperand(fs.Arg(1))
	if !src.remote && !dst.remote {
		fmt.Fprintln(stderr, "outpost cp: SRC or DST must be EXECUTOR:PATH or :PATH (for two local paths, use cp)")
		return exitUsage
	}
	for _, o := range []cpOperand{src, dst} {
		if o.remote && o.path == "" {
			fmt.Fprintln(stderr, "outpost cp: a remote path is empty")
			return exitUsage
		}
	}
	// Ctrl-C or SIGTERM cancels the transfer; cp then exits 128+n, as a
	// shell reports a command the signal ended.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	var interrupted atomic.Int32
	go func() {
		select {
		case s := <-sigc:
			interrupted.Store(int32(s.(syscall.Signal)))
			cancel()
		case <-ctx.Done():
		}
	}()
	var policy any
	if *mode != "" {
		policy = map[string]any{"mode": *mode}
	}
	// connect reaches the executor of a remote operand (one connection per
	// executor, shared when both operands are on the same one).
	conns := map[string]*client.Files{}
	var closers []io.Closer
	connect := func(o cpOperand) (*client.Files, int) {
		if f := conns[o.executor]; f != nil {
			return f, 0
		}
		url, dialCfg := *target, client.Config{ClientName: "outpost-cp"}
		if o.executor != "" {
			if *relayURL == "" {
				fmt.Fprintf(stderr, "outpost cp: %s:PATH needs --relay (or $OUTPOST_RELAY)\n", o.executor)
				return nil, exitUsage
			}
			url, dialCfg.Executor, dialCfg.Token = *relayURL, o.executor, *token
		}
		if url == "" {
			url = os.Getenv("OUTPOST_TARGET")
		}
		if url == "" {
			url = configTarget()
		}
		if url == "" {
			fmt.Fprintln(stderr, "outpost cp: no executor: give --target (or $OUTPOST_TARGET) for :PATH, or --relay for EXECUTOR:PATH")
			return nil, exitUsage
		}
		env, err := client.Dial(ctx, url, dialCfg)
		if err != nil {
			fmt.Fprintf(stderr, "outpost cp: cannot reach the executor: %v\n", err)
			return nil, exitTransport
		}
		f := env.Files(policy)
		conns[o.executor] = f
		closers = append(closers, env)
		return f, 0
	}
	defer func() {
		for _, c := range closers {
			c.Close()
		}
	}()
	opts := client.TransferOptions{
		Recursive: *recursive,
		Skipped: func(p string, _ iofs.FileMode) {
			fmt.Fprintf(stderr, "outpost cp: skipping %s (not a regular file or directory)\n", p)
		},
	}
	if !*quiet && isTerminal(os.Stderr) {
		opts.Progress = (&progressBar{w: stderr}).update
	}
	var err error
	switch {
	case src.remote && dst.remote:
		from, code := connect(src)
		if code != 0 {
			return code
		}
		to, code := connect(dst)
		if code != 0 {
			return code
		}
		if src.executor == dst.executor {
			_, err = client.CopyWithin(ctx, from, src.path, dst.path, opts)
		} else {
			_, err = client.CopyBetween(ctx, from, src.path, to, dst.path, opts)
		}
	case src.remote:
		f, code := connect(src)
		if code != 0 {
			return code
		}
		_, err = client.Download(ctx, f, src.path, dst.path, opts)
	default:
		f, code := connect(dst)
		if code != 0 {
			return code
		}
		_, err = client.Upload(ctx, f, src.path, dst.path, opts)
	}
	if n := interrupted.Load(); n != 0 {
		fmt.Fprintln(stderr, "outpost cp: interrupted (files already copied stay; the one in flight was not put in place)")
		return 128 + int(n)
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost cp:", err)
		return 1
	}
	return 0
}

// progressBar draws one line on stderr for each file of 1 MiB or more,
// from the transfer's progress reports.
type progressBar struct {
	w      io.Writer
	name   string
	total  int64
	start  time.Time
	last   time.Time
	active bool
}

func (b *progressBar) update(p client.Progress) {
	switch {
	case p.FileBytes == 0 && !p.Done: // a file begins
		*b = progressBar{w: b.w, name: path.Base(p.Path), total: p.FileSize, start: time.Now(), active: p.FileSize >= 1<<20}
	case p.Done:
		if b.active {
			b.draw(p.FileBytes)
			fmt.Fprintln(b.w)
		}
	case b.active && time.Since(b.last) >= 200*time.Millisecond:
		b.last = time.Now()
		b.draw(p.FileBytes)
	}
}

func (b *progressBar) draw(n int64) {
	pct := 100.0
	if b.total > 0 {
		pct = float64(n) * 100 / float64(b.total)
	}
	rate := float64(n) / time.Since(b.start).Seconds() / (1 << 20)
	const width = 30
	fill := min(max(int(pct/100*width), 0), width)
	fmt.Fprintf(b.w, "\r%-24.24s [%s%s] %5.1f%% %8.1f MiB/s", b.name, strings.Repeat("=", fill), strings.Repeat(" ", width-fill), pct, rate)
}
