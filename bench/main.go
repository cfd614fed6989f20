// Command bench measures outpost beside what users would use instead and
// beside the physical limit, on one machine in one run, and prints a
// Markdown table (and, with --json FILE, the same figures as JSON):
//
//   - start_to_exit: /bin/true from request to close, p50 and p99 — local
//     fork/exec (the limit), outpost in-process, direct (tcp), ws and
//     through a relay, the codex exec-server (peers.CodexVersion, ws), ssh fresh and
//     over a ControlMaster (a throwaway sshd on loopback).
//   - throughput: one process writing 256 MiB to stdout — a local pipe
//     (the limit), outpost direct, ws and relay, codex, ssh (aes128-gcm).
//   - concurrency: 1,000 concurrent `sleep 1` over one client connection
//     through the relay (wall time, errors).
//   - idle_executors: 1,000 executors joined to one relay process (the
//     relay's memory per executor).
//   - copy: a 1 GiB file uploaded with `outpost cp` (sha256-checked end to
//     end) through the relay and direct, with scp to the same sshd, and
//     with a local cp (the limit).
//   - sandbox_overhead: /bin/true under outpost's sandbox against the same
//     engine unsandboxed — a helper started per command (re-executing
//     outpost, or the dedicated outpost-sandbox) and a warm pool of
//     pre-started helpers, each run from a settled machine (10 ms after
//     the one before, the pool full) — and bubblewrap with codex's profile
//     against a plain fork/exec; then 100 sandboxed starts at once, with
//     and without the pool (p50/p99 of each start's own time, wall,
//     errors, how many a pooled helper ran).
//   - codex_turn: one whole turn of the real `codex exec` against a
//     scripted model (internal/fakemodel: one exec_command `echo hi`, then
//     a final message), from codex's start to its exit, p50 and p99, with
//     the command (unsandboxed) on codex's own exec-server
//     (codex-exec-server, the peer), on `outpost executor serve --listen
//     ws://` (outpost-ws), and through `outpost bridge` → relay →
//     `outpost executor join` (outpost-bridge-relay).
//   - cluster_hop, cluster_failover, cluster_scale: a relay cluster on
//     etcd (one etcd and three relay processes sharing one key;
//     bench/cluster.go) — a client forwarded one hop against one on the
//     executor's own relay (connect → first output, start-to-exit); new
//     commands and a streaming command's resume through a load balancer
//     while a relay is SIGKILLed; 10,000 lightweight joiners
//     (-cluster-executors): the relays' memory per executor, and the
//     rejoin storm after a relay restart with its etcd write rate. They
//     are skipped, with the reason, without an etcd binary.
//
// Each row carries ratios to the limit and to the best peer. Missing peers
// are installed first (codex with npm, openssh-server and bubblewrap with
// apt-get); a peer that cannot be installed leaves its rows skipped, with
// the reason. Run it with `make bench` (go run ./bench).
package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/fakemodel"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/local"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

const throughputBytes = 256 << 20

var (
	runs           = flag.Int("runs", 300, "start-to-exit and sandbox runs per target")
	sshRuns        = flag.Int("ssh-runs", 60, "runs of a fresh ssh connection (each is a full handshake)")
	throughputRuns = flag.Int("throughput-runs", 3, "256 MiB transfers per target (the best is reported)")
	idle           = flag.Int("idle-executors", 1000, "executors joined to one relay for the memory figure")
	codexTurnRuns  = flag.Int("codex-turn-runs", 10, "scripted `codex exec` turns per target (codex_turn)")
	jsonOut        = flag.String("json", "", "also write the results as JSON to this file")
	noInstall      = flag.Bool("no-install", false, "do not install missing peers")
	only           = flag.String("only", "", "run only these metrics (comma-separated, e.g. sandbox_overhead)")
)

// env0 is the environment of every measured command.
var env0 = map[string]string{"PATH": "/usr/bin:/bin"}

func main() {
	flag.Parse()
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// bench holds the running targets.
type bench struct {
	dir     string
	bin     string
	key     identity.Key
	servers []*peers.Server
	urls    map[string]string // target → URL
	relay   string
	token   string
	ssh     *sshPeer
	skipped map[string]string // target → why
	results []Result
}

func run() error {
	dir, err := os.MkdirTemp("", "outpost-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	b := &bench{dir: dir, urls: map[string]string{}, skipped: map[string]string{}}
	defer b.stop()
	if err := b.start(); err != nil {
		return err
	}
	for _, m := range []struct {
		name string
		run  func()
	}{
		{"start_to_exit", b.startToExit}, {"throughput", b.throughput}, {"concurrency", b.concurrency},
		{"idle_executors", b.idleExecutors}, {"sandbox_overhead", b.sandboxOverhead}, {"copy", b.copyFile}, {"copy_down", b.copyDown},
		{"codex_turn", b.codexTurn}, {"mcp_call", b.mcpCall}, {"cluster_hop", b.clusterHop}, {"cluster_failover", b.clusterFailover}, {"cluster_scale", b.clusterScale},
	} {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), m.name) {
			continue
		}
		progress(strings.ReplaceAll(m.name, "_", " "))
		m.run()
	}
	compare(b.results)
	rep := Report{Machine: peers.Machine(), Date: time.Now().UTC(), Results: b.results}
	writeMarkdown(os.Stdout, rep)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func progress(what string) { fmt.Fprintf(os.Stderr, "bench: %s…\n", what) }

// install makes sure the peers exist, installing what is missing.
func (b *bench) install() {
	if _, err := peers.CodexBinary(); err != nil && !*noInstall {
		if root, err := peers.RepoRoot(); err == nil {
			cmd := exec.Command("bash", filepath.Join(root, "scripts/install-codex.sh"))
			cmd.Stderr = os.Stderr
			if out, err := cmd.Output(); err == nil {
				os.Setenv("OUTPOST_CODEX_BIN", strings.TrimSpace(string(out)))
			}
		}
	}
	var missing []string
	if _, err := exec.LookPath("bwrap"); err != nil {
		missing = append(missing, "bubblewrap")
	}
	if _, err := exec.LookPath("ssh"); err != nil {
		missing = append(missing, "openssh-client")
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		missing = append(missing, "openssh-server")
	}
	if len(missing) > 0 && !*noInstall {
		fmt.Fprintf(os.Stderr, "bench: installing %s\n", strings.Join(missing, " "))
		install := exec.Command("apt-get", append([]string{"install", "-y", "--no-install-recommends"}, missing...)...)
		install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if install.Run() != nil {
			exec.Command("apt-get", "update").Run()
			install = exec.Command("apt-get", append([]string{"install", "-y", "--no-install-recommends"}, missing...)...)
			install.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := install.CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "bench: apt-get install failed: %v\n%s", err, lastLines(out, 5))
			}
		}
	}
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n") + "\n"
}

func (b *bench) start() error {
	b.install()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var err error
	if b.key, err = identity.Generate(); err != nil {
		return err
	}
	if b.bin, err = peers.BuildOutpost(b.dir); err != nil {
		return err
	}
	add := func(s *peers.Server, err error) (*peers.Server, error) {
		if err == nil {
			b.servers = append(b.servers, s)
		}
		return s, err
	}
	s, err := add(peers.StartOutpost(ctx, b.bin))
	if err != nil {
		return err
	}
	b.urls["outpost-ws"] = s.URL
	if s, err = add(peers.StartOutpostNative(ctx, b.bin, filepath.Join(b.dir, "native"))); err != nil {
		return err
	}
	b.urls["outpost-direct"] = s.URL
	rs, err := add(peers.StartRelay(ctx, b.bin, filepath.Join(b.dir, "relay")))
	if err != nil {
		return err
	}
	b.relay = rs.URL
	joinTok, err := peers.Token(b.bin, filepath.Join(b.dir, "relay"), "--join")
	if err != nil {
		return err
	}
	if b.token, err = peers.Token(b.bin, filepath.Join(b.dir, "relay"), "--client"); err != nil {
		return err
	}
	if _, err := add(peers.StartJoinedExecutor(ctx, b.bin, rs.URL, joinTok, "bench", filepath.Join(b.dir, "joined"))); err != nil {
		return err
	}
	b.urls["outpost-relay"] = rs.URL
	if codexBin, err := peers.CodexBinary(); err != nil {
		b.skipped["codex"] = err.Error()
	} else if s, err := add(peers.StartCodex(ctx, codexBin)); err != nil {
		b.skipped["codex"] = err.Error()
	} else {
		b.urls["codex"] = s.URL
	}
	if b.ssh, err = startSSH(filepath.Join(b.dir, "ssh")); err != nil {
		b.skipped["ssh"] = err.Error()
		b.ssh = nil
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		b.skipped["bwrap"] = "bubblewrap is not installed"
	}
	return nil
}

func (b *bench) stop() {
	for _, s := range b.servers {
		s.Stop()
	}
	if b.ssh != nil {
		b.ssh.stop()
	}
}

// connect opens a client to target.
func (b *bench) connect(target string) (client.Environment, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if target == "outpost-local" {
		return local.New(ctx)
	}
	url := b.urls[target]
	cfg := client.Config{Key: b.key, NoResume: true, KnownExecutors: filepath.Join(b.dir, "known_executors")}
	if target == "outpost-relay" {
		cfg.Executor, cfg.Token = "bench", b.token
	}
	for {
		env, err := client.Dial(ctx, url, cfg)
		if err == nil || ctx.Err() != nil {
			return env, err
		}
		time.Sleep(20 * time.Millisecond) // the joined executor may still be joining
	}
}

func (b *bench) add(r Result) { b.results = append(b.results, r) }

func (b *bench) skip(metric, target, why string) {
	b.add(Result{Metric: metric, Target: target, Skipped: why})
}

// timed runs f n times and records p50/p99.
func (b *bench) timed(metric, target string, n int, f func() error) {
	b.timedSettled(metric, target, n, nil, f)
}

// timedSettled is timed with settle, untimed, before every run.
func (b *bench) timedSettled(metric, target string, n int, settle func(), f func() error) {
	if settle == nil {
		settle = func() {}
	}
	settle()
	if err := f(); err != nil { // warm-up
		b.skip(metric, target, err.Error())
		return
	}
	d := make([]time.Duration, 0, n)
	for range n {
		settle()
		t0 := time.Now()
		if err := f(); err != nil {
			b.skip(metric, target, err.Error())
			return
		}
		d = append(d, time.Since(t0))
	}
	p50, p99 := peers.Percentiles(d)
	b.add(Result{Metric: metric, Target: target, Runs: n, P50Ms: f64(p50), P99Ms: f64(p99)})
}

// startRemote runs argv on env to completion and returns the output size.
func startRemote(env client.Environment, argv ...string) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := env.Start(ctx, protocol.ExecParams{Argv: argv, Cwd: "file:///tmp", Env: env0})
	if err != nil {
		return 0, err
	}
	n := 0
	for ev := range p.Events() {
		if ev.Kind == client.EventFailed {
			return n, ev.Err
		}
		n += len(ev.Data)
	}
	return n, nil
}

const outpostTargets = "outpost-local outpost-direct outpost-ws outpost-relay codex"

func (b *bench) startToExit() {
	b.timed("start_to_exit", "local-limit", *runs, func() error { return exec.Command("/bin/true").Run() })
	for _, target := range strings.Fields(outpostTargets) {
		if why, ok := b.skipped[target]; ok {
			b.skip("start_to_exit", target, why)
			continue
		}
		env, err := b.connect(target)
		if err != nil {
			b.skip("start_to_exit", target, err.Error())
			continue
		}
		b.timed("start_to_exit", target, *runs, func() error { _, err := startRemote(env, "/bin/true"); return err })
		env.Close()
	}
	if b.ssh == nil {
		b.skip("start_to_exit", "ssh", b.skipped["ssh"])
		b.skip("start_to_exit", "ssh-controlmaster", b.skipped["ssh"])
		return
	}
	b.timed("start_to_exit", "ssh", *sshRuns, func() error { return b.ssh.command(false, "true").Run() })
	b.timed("start_to_exit", "ssh-controlmaster", *runs, func() error { return b.ssh.command(true, "true").Run() })
}

// rate runs f throughputRuns times and records the best MB/s.
func (b *bench) rate(target string, f func() (int, error)) {
	best := 0.0
	for range *throughputRuns {
		t0 := time.Now()
		n, err := f()
		if err == nil && n != throughputBytes {
			err = fmt.Errorf("received %d bytes, want %d", n, throughputBytes)
		}
		if err != nil {
			b.skip("throughput", target, err.Error())
			return
		}
		best = max(best, float64(n)/time.Since(t0).Seconds()/1e6)
	}
	b.add(Result{Metric: "throughput", Target: target, Runs: *throughputRuns, MBps: f64(best)})
}

func (b *bench) throughput() {
	argv := []string{"head", "-c", strconv.Itoa(throughputBytes), "/dev/zero"}
	count := func(cmd *exec.Cmd) (int, error) {
		out, err := cmd.StdoutPipe()
		if err != nil {
			return 0, err
		}
		if err := cmd.Start(); err != nil {
			return 0, err
		}
		n, _ := io.CopyBuffer(io.Discard, out, make([]byte, 256<<10))
		return int(n), cmd.Wait()
	}
	b.rate("local-limit", func() (int, error) { return count(exec.Command(argv[0], argv[1:]...)) })
	for _, target := range strings.Fields("outpost-direct outpost-ws outpost-relay codex") {
		if why, ok := b.skipped[target]; ok {
			b.skip("throughput", target, why)
			continue
		}
		env, err := b.connect(target)
		if err != nil {
			b.skip("throughput", target, err.Error())
			continue
		}
		b.rate(target, func() (int, error) { return startRemote(env, argv...) })
		env.Close()
	}
	if b.ssh == nil {
		b.skip("throughput", "ssh", b.skipped["ssh"])
		return
	}
	b.rate("ssh", func() (int, error) { return count(b.ssh.command(false, argv...)) })
}

func (b *bench) concurrency() {
	const n = 1000
	env, err := b.connect("outpost-relay")
	if err != nil {
		b.skip("concurrency", "outpost-relay", err.Error())
		return
	}
	defer env.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"sleep", "1"}, Env: env0})
			if err == nil {
				var res client.Result
				if res, err = p.Wait(ctx); err == nil && res.ExitCode != 0 {
					err = fmt.Errorf("exit %d", res.ExitCode)
				}
			}
			if err != nil {
				mu.Lock()
				failed++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	b.add(Result{Metric: "concurrency", Target: "outpost-relay", Runs: n, WallS: f64(time.Since(t0).Seconds()), Errors: &failed})
}

func (b *bench) idleExecutors() {
	n := *idle
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	state := filepath.Join(b.dir, "idle-relay")
	rs, err := peers.StartRelay(ctx, b.bin, state)
	if err != nil {
		b.skip("idle_executors", "outpost-relay", err.Error())
		return
	}
	defer rs.Stop()
	tok, err := peers.Token(b.bin, state, "--join")
	if err != nil {
		b.skip("idle_executors", "outpost-relay", err.Error())
		return
	}
	before := rssKiB(rs.Pid())
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		b.skip("idle_executors", "outpost-relay", err.Error())
		return
	}
	defer srv.Shutdown(context.Background())
	jctx, stop := context.WithCancel(ctx)
	defer stop()
	joined := make(chan struct{}, n)
	t0 := time.Now()
	for i := range n {
		k, err := identity.Generate()
		if err != nil {
			b.skip("idle_executors", "outpost-relay", err.Error())
			return
		}
		go srv.Join(jctx, executor.JoinConfig{RelayURL: rs.URL, Key: k.Keypair(), ID: "idle-" + strconv.Itoa(i), Token: tok,
			Joined: func() { joined <- struct{}{} }})
	}
	for i := range n {
		select {
		case <-joined:
		case <-ctx.Done():
			b.skip("idle_executors", "outpost-relay", fmt.Sprintf("%d of %d joined", i, n))
			return
		}
	}
	wall := time.Since(t0).Seconds()
	after := rssKiB(rs.Pid())
	b.add(Result{Metric: "idle_executors", Target: "outpost-relay", Runs: n, WallS: f64(wall), RSSPerExecutorKiB: f64(float64(after-before) / float64(n))})
}

// bwrapProfile is codex's bubblewrap profile for a sandboxed command.
var bwrapProfile = []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--die-with-parent"}

func (b *bench) sandboxOverhead() {
	const metric = "sandbox_overhead"
	b.timed(metric, "local-limit", *runs, func() error { return exec.Command("/bin/true").Run() })
	limit := b.results[len(b.results)-1]
	// viaExecutor times /bin/true started through an embedded executor's
	// session with policy, its backend keeping pool pre-started helpers.
	// Every run starts from a settled machine: 10 ms after the one before
	// (the helper's reaping and the pool's refill done), with the pool
	// full — "warm" — when there is one.
	viaExecutor := func(target string, policy any, pool int) *Result {
		backend := engine.NewLocalBackend()
		backend.SandboxPool = pool
		cfg := executor.DefaultConfig()
		cfg.DefaultCwd = b.dir
		cfg.Backend = backend
		srv, err := executor.NewServer(cfg)
		if err != nil {
			b.skip(metric, target, err.Error())
			return nil
		}
		defer srv.Shutdown(context.Background())
		sess, err := srv.OpenSession()
		if err != nil {
			b.skip(metric, target, err.Error())
			return nil
		}
		if pool > 0 {
			backend.WarmSandbox(srv.Config().SandboxUser)
		}
		settle := func() {
			time.Sleep(10 * time.Millisecond)
			for deadline := time.Now().Add(10 * time.Second); pool > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if st, ok := backend.SandboxPoolStats(); ok && st.Ready == st.Size {
					return
				}
			}
		}
		i := 0
		b.timedSettled(metric, target, *runs, settle, func() error {
			i++
			p, err := sess.StartProcess(context.Background(), protocol.ExecParams{ProcessID: "b" + strconv.Itoa(i), Argv: []string{"/bin/true"}, Env: map[string]string{}, Sandbox: policy})
			if err != nil {
				return err
			}
			<-p.Log().Closed()
			return nil
		})
		r := &b.results[len(b.results)-1]
		if st, ok := backend.SandboxPoolStats(); ok && r.Skipped == "" {
			r.PoolTaken, r.PoolMissed = intp(int(st.Taken)), intp(int(st.Missed))
		}
		return r
	}
	overhead := func(r, base *Result) {
		if r != nil && r.P50Ms != nil && base != nil && base.P50Ms != nil {
			r.OverheadMs = f64(*r.P50Ms - *base.P50Ms)
		}
	}
	workspaceWrite := map[string]any{"mode": "workspace-write"}
	base := viaExecutor("outpost-unsandboxed", nil, 0)
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
		b.skip(metric, "outpost-sandbox", err.Error())
	} else {
		// The helper is the real outpost binary re-executed, as by default.
		sandbox.SetHelperBinary(b.bin)
		overhead(viaExecutor("outpost-sandbox", workspaceWrite, 0), base)
		// And through the dedicated outpost-sandbox binary (--sandbox-helper).
		helper := filepath.Join(b.dir, "outpost-sandbox")
		build := exec.Command("go", "build", "-o", helper, "./cmd/outpost-sandbox")
		build.Dir, _ = peers.RepoRoot()
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := build.CombinedOutput(); err != nil {
			b.skip(metric, "outpost-sandbox-helper", fmt.Sprintf("go build: %v: %s", err, lastLines(out, 3)))
		} else if err := sandbox.UseHelper(helper); err != nil {
			b.skip(metric, "outpost-sandbox-helper", err.Error())
		} else {
			overhead(viaExecutor("outpost-sandbox-helper", workspaceWrite, 0), base)
			// Pre-started helpers (the executor's default), warm.
			overhead(viaExecutor("outpost-sandbox-pool", workspaceWrite, engine.DefaultSandboxPool()), base)
			b.sandboxBurst("outpost-sandbox-burst", workspaceWrite, 0)
			b.sandboxBurst("outpost-sandbox-pool-burst", workspaceWrite, engine.DefaultSandboxPool())
		}
	}
	if why, ok := b.skipped["bwrap"]; ok {
		b.skip(metric, "bwrap", why)
		return
	}
	b.timed(metric, "bwrap", *runs, func() error { return exec.Command("bwrap", append(bwrapProfile, "/bin/true")...).Run() })
	if r := &b.results[len(b.results)-1]; r.P50Ms != nil && limit.P50Ms != nil {
		r.OverheadMs = f64(*r.P50Ms - *limit.P50Ms)
	}
}

func intp(v int) *int { return &v }

// burstSize is how many sandboxed starts sandboxBurst makes at once.
const burstSize = 100

// sandboxBurst starts burstSize sandboxed /bin/true at once through an
// executor keeping pool helpers, warm: the first few take pre-started
// helpers, the rest start their own while the pool refills (pool 0: every
// start its own, for comparison). Each start's own start-to-exit time
// makes the percentiles; none may fail.
func (b *bench) sandboxBurst(target string, policy any, pool int) {
	const metric = "sandbox_overhead"
	backend := engine.NewLocalBackend()
	backend.SandboxPool = pool
	cfg := executor.DefaultConfig()
	cfg.DefaultCwd = b.dir
	cfg.Backend = backend
	cfg.MaxProcessesPerSession = 2 * burstSize
	srv, err := executor.NewServer(cfg)
	if err != nil {
		b.skip(metric, target, err.Error())
		return
	}
	defer srv.Shutdown(context.Background())
	sess, err := srv.OpenSession()
	if err != nil {
		b.skip(metric, target, err.Error())
		return
	}
	backend.WarmSandbox(srv.Config().SandboxUser)
	for deadline := time.Now().Add(10 * time.Second); pool > 0 && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if st, ok := backend.SandboxPoolStats(); ok && st.Ready == st.Size {
			break
		}
	}
	time.Sleep(10 * time.Millisecond)
	d := make([]time.Duration, burstSize)
	errs := 0
	var mu sync.Mutex
	var wg sync.WaitGroup
	t0 := time.Now()
	for i := range burstSize {
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			p, err := sess.StartProcess(context.Background(), protocol.ExecParams{ProcessID: "burst" + strconv.Itoa(i), Argv: []string{"/bin/true"}, Env: map[string]string{}, Sandbox: policy})
			if err == nil {
				<-p.Log().Closed()
				if st := p.Log().Snapshot(); !st.Exited || st.ExitCode != 0 {
					err = fmt.Errorf("exit %d", st.ExitCode)
				}
			}
			d[i] = time.Since(start)
			if err != nil {
				mu.Lock()
				errs++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	wall := time.Since(t0)
	p50, p99 := peers.Percentiles(d)
	r := Result{Metric: metric, Target: target, Runs: burstSize, P50Ms: f64(p50), P99Ms: f64(p99), WallS: f64(wall.Seconds()), Errors: intp(errs)}
	if st, ok := backend.SandboxPoolStats(); ok {
		r.PoolTaken, r.PoolMissed = intp(int(st.Taken)), intp(int(st.Missed))
	}
	b.add(r)
}

// copyFile uploads a 1 GiB file with outpost cp (through the relay and
// direct) and with scp, best of two each; copyDown downloads it.
func (b *bench) copyFile() { b.copyOneWay("copy", false) }
func (b *bench) copyDown() { b.copyOneWay("copy_down", true) }

func (b *bench) copyOneWay(metric string, down bool) {
	const size = 1 << 30
	src := filepath.Join(b.dir, "copy-src.bin")
	f, err := os.Create(src)
	if err != nil {
		b.skip(metric, "outpost-relay", err.Error())
		return
	}
	buf := make([]byte, 1<<20)
	for i := 0; i < size; i += len(buf) {
		for j := range buf {
			buf[j] = byte(i>>20 + j*31)
		}
		f.Write(buf)
	}
	f.Close()
	defer os.Remove(src)
	dst := filepath.Join(b.dir, "copy-dst")
	os.MkdirAll(dst, 0o755)
	// The targets take turns, in reverse order the second round, and each
	// keeps its best run: whichever target ran right after the local cp
	// (the relay, when each ran twice in a row) was about 20% slower,
	// whatever it was — the page cache and disk still busy with the
	// gigabytes just written. sync before each run starts it with no
	// dirty pages left by the one before.
	type copyTarget struct {
		name string
		cmd  func() *exec.Cmd
		best float64
		skip string
	}
	// ends are cp's operands: the remote one (prefix) is the source when
	// down, the destination otherwise.
	ends := func(prefix, name string) (string, string) {
		if down {
			return prefix + src, filepath.Join(dst, name)
		}
		return src, prefix + filepath.Join(dst, name)
	}
	targets := []*copyTarget{
		{name: "outpost-relay", cmd: func() *exec.Cmd {
			from, to := ends("bench:", "outpost.bin")
			c := exec.Command(b.bin, "cp", "-q", "--relay", b.relay, "--token", b.token, from, to)
			c.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(b.dir, "cfg"))
			return c
		}},
		{name: "outpost-direct", cmd: func() *exec.Cmd {
			from, to := ends(":", "direct.bin")
			c := exec.Command(b.bin, "cp", "-q", "--target", b.urls["outpost-direct"], from, to)
			c.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(b.dir, "cfg"))
			return c
		}},
		{name: "scp", cmd: func() *exec.Cmd {
			if down {
				return b.ssh.scpFrom(src, filepath.Join(dst, "scp.bin"))
			}
			return b.ssh.scp(src, filepath.Join(dst, "scp.bin"))
		}},
	}
	if b.ssh == nil {
		targets[2].skip = cmp.Or(b.skipped["ssh"], "no ssh server")
	}
	timeCopy := func(t *copyTarget) {
		if t.skip != "" {
			return
		}
		// Every run starts from the same memory state: the copies of the
		// round before removed, then synced. Left in place, the
		// comparison turned on how a copy replaces its destination, not
		// on its speed: on VMs that hand freed memory back to the host
		// (free page reporting), scp truncating the old copy frees its
		// page cache just before writing and reuses it, while outpost
		// (a temporary file renamed into place at the end) frees it after
		// and the next run's writes fault fresh pages in from the host —
		// 2-3 CPU-s per GiB.
		for _, name := range []string{"outpost.bin", "direct.bin", "scp.bin", "local.bin"} {
			os.Remove(filepath.Join(dst, name))
		}
		syncDisks()
		c := t.cmd()
		t0 := time.Now()
		if out, err := c.CombinedOutput(); err != nil {
			t.skip = fmt.Sprintf("%v: %s", err, lastLines(out, 2))
			return
		}
		t.best = max(t.best, size/time.Since(t0).Seconds()/1e6)
	}
	local := &copyTarget{name: "local-limit", cmd: func() *exec.Cmd { return exec.Command("cp", src, filepath.Join(dst, "local.bin")) }}
	// Three rounds, every other one in reverse order: one run in three
	// on this VM pays 2-3 CPU-s per GiB to fault page cache in from the
	// host, whoever runs it, and the best of three is rarely that one.
	const rounds = 3
	for range rounds {
		timeCopy(local)
	}
	for round := range rounds {
		for i := range targets {
			if round%2 == 1 {
				i = len(targets) - 1 - i
			}
			timeCopy(targets[i])
		}
	}
	for _, t := range append([]*copyTarget{local}, targets...) {
		if t.skip != "" {
			b.skip(metric, t.name, t.skip)
		} else {
			b.add(Result{Metric: metric, Target: t.name, Runs: rounds, MBps: f64(t.best)})
		}
	}
}

// codexTurn times whole `codex exec` turns: the scripted model asks for
// `echo hi` and then ends the turn; each target is an exec-server for
// CODEX_EXEC_SERVER_URL. codex's own is the peer the others are compared
// with.
func (b *bench) codexTurn() {
	const metric = "codex_turn"
	targets := []string{"codex-exec-server", "outpost-ws", "outpost-bridge-relay"}
	codexBin, err := peers.CodexBinary()
	if err == nil {
		_, err = exec.LookPath(codexBin) // $OUTPOST_CODEX_BIN may name nothing
	}
	if err != nil {
		for _, target := range targets {
			b.skip(metric, target, "the codex CLI is needed to drive the turn: "+err.Error())
		}
		return
	}
	urls := map[string]string{"outpost-ws": b.urls["outpost-ws"]}
	if why, ok := b.skipped["codex"]; ok {
		b.skip(metric, "codex-exec-server", why)
	} else {
		urls["codex-exec-server"] = b.urls["codex"]
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	chain, err := peers.StartBridgeChain(ctx, b.bin, filepath.Join(b.dir, "codex-turn"), "codex-turn")
	cancel()
	if err != nil {
		b.skip(metric, "outpost-bridge-relay", err.Error())
	} else {
		defer chain.Stop()
		urls["outpost-bridge-relay"] = chain.URL
	}
	// One model for every turn: it answers by the conversation, so each
	// run gets the same script.
	model := fakemodel.Start([]fakemodel.Step{{Exec: &fakemodel.ExecCall{Cmd: "echo hi"}}, {Say: "done"}})
	defer model.Close()
	for _, target := range targets {
		url, ok := urls[target]
		if !ok {
			continue // skipped above
		}
		ws := filepath.Join(b.dir, "codex-turn-ws-"+target)
		if err := os.MkdirAll(ws, 0o755); err != nil {
			b.skip(metric, target, err.Error())
			continue
		}
		// A CODEX_HOME per target, kept across its runs (the warm-up run
		// pays for whatever codex sets up there the first time).
		env, err := fakemodel.CodexEnv(filepath.Join(b.dir, "codex-turn-home-"+target), model.BaseURL(), url)
		if err != nil {
			b.skip(metric, target, err.Error())
			continue
		}
		argv := fakemodel.CodexExecArgs(ws, "--dangerously-bypass-approvals-and-sandbox")
		b.timed(metric, target, *codexTurnRuns, func() error { return runCodexTurn(codexBin, argv, env, ws, model) })
	}
}

// runCodexTurn runs one `codex exec` to its exit and checks that the model
// was handed back echo's output and clean exit.
func runCodexTurn(bin string, argv, env []string, dir string, model *fakemodel.Model) error {
	before := len(model.Errors())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env, cmd.Dir = env, dir
	procgroup.KillOnCancel(cmd)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("codex exec: %v: %s", err, strings.TrimSpace(lastLines(out.Bytes(), 3)))
	}
	if errs := model.Errors(); len(errs) > before {
		return fmt.Errorf("scripted model: %v", errors.Join(errs[before:]...))
	}
	outs := model.ToolOutputs()
	if len(outs) != 1 || !outs[0].Exited || outs[0].ExitCode != 0 || strings.TrimSpace(outs[0].Output) != "hi" {
		return fmt.Errorf("codex handed the model %v, not echo hi's output and clean exit", outs)
	}
	return nil
}

// rssKiB is a process's resident set.
func rssKiB(pid int) int {
	data, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) > 0 {
				n, _ := strconv.Atoi(f[0])
				return n
			}
		}
	}
	return 0
}
