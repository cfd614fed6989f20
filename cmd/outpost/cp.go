package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// cpOperand is one side of a copy: a local path, or a path on an
// executor (EXECUTOR:PATH through the relay, or :PATH on --target).
type cpOperand struct {
	remote   bool
	executor string
	path     string
}

// parseOperand: "ID:/p" and ":/p" are remote; anything whose part before
// the first ':' holds a path separator (or that has no ':') is local. On
// Windows a path with a volume name — a drive letter (C:\x, C:/x, C:x) or
// a UNC share (\\host\share) — is local too, and '\' separates as '/'
// does: there an executor whose id is one letter is out of cp's reach.
func parseOperand(s string) cpOperand {
	if filepath.VolumeName(s) != "" {
		return cpOperand{path: s}
	}
	i := strings.IndexByte(s, ':')
	if i < 0 || strings.IndexFunc(s[:i], func(r rune) bool { return r < utf8.RuneSelf && os.IsPathSeparator(byte(r)) }) >= 0 {
		return cpOperand{path: s}
	}
	return cpOperand{remote: true, executor: s[:i], path: s[i+1:]}
}

func cmdCp(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost cp", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), `usage: outpost cp [flags] SRC DST

EXECUTOR:PATH is on executor EXECUTOR, reached through --relay (or
$OUTPOST_RELAY) with --token (or $OUTPOST_TOKEN); :PATH is on the --target
executor (or $OUTPOST_TARGET, the config file). One side or both may be
remote: within one executor it copies by itself; between two, files stream
through here. Every file is checked end to end: XXH3-128 by default (the
encrypted channel already stops tampering; the check catches lost, torn or
misplaced blocks), or sha256 with --digest sha256.

A relative remote PATH (or ~/PATH) is in the remote user's home directory
(or the executor's working directory if it reports no home), as with scp.
Missing parent directories of DST are made, for a file as for a tree.
SRC itself is followed if it is a symlink; inside a tree symlinks are
copied as symlinks (their text kept), or with -L what they lead to. A
symlink already in DST is never written through. With stderr a terminal,
one line shows the progress of the whole copy.

`)
		fs.PrintDefaults()
	}
	recursive := fs.Bool("r", false, "copy directories recursively")
	follow := fs.Bool("L", false, "copy what symlinks lead to instead of the links (as cp -L)")
	target := fs.String("target", "", "executor URL for :PATH operands (default $OUTPOST_TARGET or the config file)")
	acceptNew := acceptNewFlag(fs)
	relayURL := fs.String("relay", "", "relay URL for EXECUTOR:PATH operands (default $OUTPOST_RELAY or \"relay =\" in the config file)")
	token := fs.String("token", "", "client token for the relay (default $OUTPOST_TOKEN or \"token =\" in the config file; never printed)")
	mode := fs.String("sandbox", "", "judge the remote side by this sandbox mode (read-only, workspace-write, full-access)")
	flagChoices(fs, "sandbox", sandboxModes...)
	quiet := fs.Bool("q", false, "no progress line")
	digestAlg := fs.String("digest", protocol.DigestXXH3, "digest of the end-to-end check")
	flagChoices(fs, "digest", protocol.DigestXXH3, protocol.DigestSHA256)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	*relayURL, *token = orDefault(*relayURL, "OUTPOST_RELAY", "relay"), orDefault(*token, "OUTPOST_TOKEN", "token")
	if fs.NArg() != 2 {
		fs.Usage()
		return exitUsage
	}
	if !slices.Contains(choicesOf(fs, "digest"), *digestAlg) {
		fmt.Fprintf(stderr, "outpost cp: unknown --digest %q (choose %s)\n", *digestAlg, strings.Join(choicesOf(fs, "digest"), " or "))
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
		if _, err := sandbox.ParseMode(*mode); err != nil {
			fmt.Fprintln(stderr, "outpost cp: --sandbox:", err)
			return exitUsage
		}
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
		accept, err := acceptNewSetting(fs, *acceptNew)
		if err != nil {
			fmt.Fprintln(stderr, "outpost cp:", err)
			return nil, exitUsage
		}
		pinning(&dialCfg, accept, stderr)
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
		where := remote{URL: url}
		if dialCfg.Executor != "" {
			where = remote{URL: url, Relay: url, Executor: dialCfg.Executor}
		}
		if err := where.check(); err != nil {
			fmt.Fprintln(stderr, "outpost cp:", err)
			return nil, exitUsage
		}
		env, err := client.Dial(ctx, url, dialCfg)
		if err != nil {
			fmt.Fprintf(stderr, "outpost cp: cannot reach the executor: %v\n", err)
			return nil, dialExit(err)
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
		Recursive:   *recursive,
		FollowLinks: *follow,
		Digest:      *digestAlg,
		Skipped: func(p string, _ iofs.FileMode) {
			fmt.Fprintf(stderr, "outpost cp: skipping %s (a device, socket or fifo)\n", p)
		},
	}
	bar := &progressBar{w: stderr}
	if !*quiet && isTerminal(os.Stderr) {
		opts.Progress = bar.update
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
	bar.finish()
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

// progressBar draws one line on stderr for the whole copy, from the
// transfer's progress reports: bytes done of the total, the rate, the
// time left, files done of the total. It is redrawn at most every
// 200 ms and ended with a newline when the last file is done (or by
// finish, when the copy stops early). cp draws it only on a terminal.
type progressBar struct {
	w     io.Writer
	now   func() time.Time // time.Now; a test's clock
	start time.Time
	last  time.Time
	open  bool // a line is drawn and not ended
}

func (b *progressBar) update(p client.Progress) {
	now := time.Now
	if b.now != nil {
		now = b.now
	}
	t := now()
	if b.start.IsZero() {
		b.start = t
	}
	final := p.Done && p.Files == p.FileCount
	if !final && b.open && t.Sub(b.last) < 200*time.Millisecond {
		return
	}
	b.last = t
	b.draw(p, t.Sub(b.start))
	if final {
		b.finish()
	}
}

// finish ends a drawn line.
func (b *progressBar) finish() {
	if b.open {
		fmt.Fprintln(b.w)
		b.open = false
	}
}

func (b *progressBar) draw(p client.Progress, elapsed time.Duration) {
	pct := 100.0
	if p.Size > 0 {
		pct = float64(p.Bytes) * 100 / float64(p.Size)
	}
	rate, eta := 0.0, "--:--"
	if s := elapsed.Seconds(); s > 0 {
		rate = float64(p.Bytes) / s
	}
	if rate > 0 {
		eta = cpClock(time.Duration(float64(p.Size-p.Bytes) / rate * float64(time.Second)))
	}
	// \x1b[K clears what a longer line before left.
	fmt.Fprintf(b.w, "\r%s / %s %3.0f%% %s/s ETA %s %d/%d files\x1b[K", cpSize(float64(p.Bytes)), cpSize(float64(p.Size)), pct, cpSize(rate), eta, p.Files, p.FileCount)
	b.open = true
}

// cpSize is a byte count in binary units, one decimal.
func cpSize(n float64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB"}
	i := 0
	for ; n >= 1024 && i < len(units)-1; i++ {
		n /= 1024
	}
	if i == 0 {
		return fmt.Sprintf("%.0f %s", n, units[i])
	}
	return fmt.Sprintf("%.1f %s", n, units[i])
}

// cpClock is a duration as m:ss or h:mm:ss.
func cpClock(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	if s >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
	}
	return fmt.Sprintf("%d:%02d", s/60, s%60)
}
