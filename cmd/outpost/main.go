// Command outpost runs commands on remote machines through an end-to-end
// encrypted relay. This file holds only flag parsing and human output;
// the work is done by the library packages.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/sandbox"
	"github.com/outpost-exec/outpost/transport"
)

// version and commit are set at build time with -ldflags "-X
// main.version=... -X main.commit=..." (make build sets the commit).
var (
	version = "dev"
	commit  = ""
)

func main() {
	// The executor re-executes itself as the sandbox helper.
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	// OUTPOST_CPUPROFILE=FILE writes a CPU profile of the whole run, for
	// finding where a benchmark's time goes.
	if path := os.Getenv("OUTPOST_CPUPROFILE"); path != "" {
		if f, err := os.Create(path); err == nil {
			pprof.StartCPUProfile(f)
			code := run(os.Args[1:], os.Stdout, os.Stderr)
			pprof.StopCPUProfile()
			f.Close()
			os.Exit(code)
		}
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run dispatches args through the command table (commands.go).
func run(args []string, stdout, stderr io.Writer) int {
	startConfigWarnings(stderr)
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText(""))
		return exitUsage
	}
	switch args[0] {
	case "-v", "--version":
		return cmdVersion(args[1:], stdout, stderr)
	case "-h", "-help", "--help":
		return cmdHelp(args[1:], stdout, stderr)
	}
	c, group, n := lookup(args)
	switch {
	case c != nil:
		return c.run(args[n:], stdout, stderr)
	case n == 0:
		fmt.Fprintf(stderr, "outpost: unknown command %q\n\n%s", args[0], usageText(""))
		return exitUsage
	case n < len(args) && (args[n] == "-h" || args[n] == "-help" || args[n] == "--help"):
		// outpost executor -h (and outpost help executor): the group's
		// commands, as help, on stdout.
		fmt.Fprint(stdout, usageText(group))
		return 0
	case n < len(args):
		fmt.Fprintf(stderr, "outpost %s: unknown command %q\n\n%s", group, args[n], usageText(group))
		return exitUsage
	}
	fmt.Fprint(stderr, usageText(group))
	return exitUsage
}

// logFlags are shared by every long-running command.
type logFlags struct {
	level  string
	format string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn, error")
	fs.StringVar(&l.format, "log-format", "console", "log format: console or json")
	flagChoices(fs, "log-level", "debug", "info", "warn", "error")
	flagChoices(fs, "log-format", "console", "json")
}

func (l *logFlags) build(stderr io.Writer) (*zap.Logger, error) {
	lvl, err := zapcore.ParseLevel(l.level)
	if err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	encCfg := zap.NewProductionEncoderConfig()
	encCfg.EncodeTime = zapcore.ISO8601TimeEncoder
	var enc zapcore.Encoder
	switch l.format {
	case "json":
		enc = zapcore.NewJSONEncoder(encCfg)
	case "console":
		enc = zapcore.NewConsoleEncoder(encCfg)
	default:
		return nil, fmt.Errorf("--log-format: want console or json, got %q", l.format)
	}
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(stderr), lvl)), nil
}

// executorLimitFlags registers the limits shared by executor serve and
// executor join.
func executorLimitFlags(fs *flag.FlagSet) (*executor.Config, *engine.LocalBackend) {
	cfg := new(executor.Config)
	*cfg = executor.DefaultConfig()
	backend := engine.NewLocalBackend()
	fs.DurationVar(&cfg.DetachedTTL, "detached-ttl", cfg.DetachedTTL, "how long a disconnected session's processes keep running")
	fs.DurationVar(&cfg.ClosedRetention, "closed-retention", cfg.ClosedRetention, "how long a finished process stays readable")
	fs.IntVar(&cfg.MaxProcessesPerSession, "max-processes", cfg.MaxProcessesPerSession, "processes per session")
	fs.IntVar(&cfg.MaxSessions, "max-sessions", cfg.MaxSessions, "sessions per executor")
	fs.Int64Var(&backend.Retention.MaxBytes, "retention-bytes", backend.Retention.MaxBytes, "output retained per process, bytes")
	fs.IntVar(&backend.Retention.MaxChunks, "retention-chunks", backend.Retention.MaxChunks, "output retained per process, chunks")
	fs.DurationVar(&backend.TerminateGrace, "terminate-grace", backend.TerminateGrace, "wait between TERM and KILL on terminate")
	fs.Int64Var(&cfg.MaxFileBytes, "max-file-bytes", cfg.MaxFileBytes, "largest whole-file fs/readFile or fs/writeFile (larger files stream)")
	fs.IntVar(&cfg.MaxFileHandles, "max-file-handles", cfg.MaxFileHandles, "open fs handles per session")
	fs.StringVar(&sandboxHelper, "sandbox-helper", "", "run sandboxed commands through this outpost-sandbox binary (of this build) instead of re-executing outpost, for faster starts (default: an outpost-sandbox beside this binary, if any)")
	fs.StringVar(&cgroupFlags.mode, "cgroups", "auto", "a cgroup v2 per command, so terminate kills every process it started: auto (where cgroup v2 is writable) or off")
	flagChoices(fs, "cgroups", "auto", "off")
	fs.Var(&cgroupFlags.memoryMax, "memory-max", "each command's memory limit (cgroup memory.max), e.g. 2G; must be enforceable here (default: none)")
	fs.Uint64Var(&cfg.SandboxLimits.OpenFiles, "rlimit-nofile", cfg.SandboxLimits.OpenFiles, "sandboxed commands' open-file limit (RLIMIT_NOFILE; 0: inherited)")
	fs.Var((*poolSizeFlag)(&backend.SandboxPool), "sandbox-pool", fmt.Sprintf("sandbox helpers kept started ahead of sandboxed commands, each for one command (0: none; at most %d; default one per core, 2 to 4)", engine.MaxSandboxPool))
	fs.Var((*uSizeFlag)(&cfg.SandboxLimits.FileSize), "rlimit-fsize", "sandboxed commands' largest file, e.g. 16G (RLIMIT_FSIZE; 0: inherited)")
	fs.Uint64Var(&cfg.SandboxLimits.Processes, "rlimit-nproc", cfg.SandboxLimits.Processes, "sandboxed commands' RLIMIT_NPROC, which counts every process of the user (0: inherited; prefer --pids-max)")
	fs.Var(sandboxUserFlag{&cfg.SandboxUser}, "sandbox-user", "as root: the host UID:GID sandboxed commands run as (root only inside their user namespace; never 0; default 65534:65534)")
	fs.Var((*pathListFlag)(&cfg.SandboxHidden), "hide", "a path hidden from every sandboxed command and policy-judged fs call, besides the executor's state, client configuration and sockets (repeatable)")
	fs.Int64Var(&cgroupFlags.pidsMax, "pids-max", -1, "each command's process limit (cgroup pids.max); an explicit value must be enforceable here, 0 is none (default: 4096 where the pids controller can be delegated)")
	return cfg, backend
}

// sandboxUserFlag is --sandbox-user UID[:GID].
type sandboxUserFlag struct{ u **sandbox.User }

func (f sandboxUserFlag) String() string {
	if f.u == nil || *f.u == nil {
		return ""
	}
	return (*f.u).String()
}

func (f sandboxUserFlag) Set(v string) error {
	us, gs, hasGID := strings.Cut(v, ":")
	uid, err := strconv.Atoi(us)
	gid := uid
	if err == nil && hasGID {
		gid, err = strconv.Atoi(gs)
	}
	if err != nil || uid < 0 || gid < 0 {
		return fmt.Errorf("want UID or UID:GID, got %q", v)
	}
	if uid == 0 || gid == 0 {
		return sandbox.ErrRootSandboxUser
	}
	*f.u = &sandbox.User{UID: uid, GID: gid}
	return nil
}

// pathListFlag appends absolute paths.
type pathListFlag []string

func (f *pathListFlag) String() string { return strings.Join(*f, ",") }

func (f *pathListFlag) Set(v string) error {
	if !filepath.IsAbs(v) {
		return fmt.Errorf("%q is not an absolute path", v)
	}
	*f = append(*f, filepath.Clean(v))
	return nil
}

// cgroupFlags are --cgroups, --memory-max and --pids-max (executor serve
// and join).
var cgroupFlags = struct {
	mode      string
	memoryMax sizeFlag
	pidsMax   int64
}{}

// useCgroups gives every command a cgroup as the flags ask. It fails only
// when a limit given explicitly cannot be enforced; otherwise commands
// run in process groups alone and the log says why. The returned func
// kills what commands left behind and removes their cgroups.
func useCgroups(log *zap.Logger, backend *engine.LocalBackend) (func(), error) {
	f := cgroupFlags
	switch f.mode {
	case "off":
		if f.memoryMax > 0 || f.pidsMax > 0 {
			return nil, errors.New("--memory-max and --pids-max need --cgroups auto")
		}
		return func() {}, nil
	case "auto":
	default:
		return nil, fmt.Errorf("--cgroups: want auto or off, got %q", f.mode)
	}
	cfg := cgroup.DefaultConfig()
	cfg.MemoryMax = int64(f.memoryMax)
	if f.pidsMax >= 0 {
		cfg.PidsMax = f.pidsMax
	}
	m, err := cgroup.Open(cfg)
	if err != nil {
		if f.memoryMax > 0 || f.pidsMax > 0 {
			return nil, fmt.Errorf("--memory-max/--pids-max cannot be enforced: %w", err)
		}
		log.Info("commands run without cgroups: terminate reaches their process group only", zap.Error(err))
		return func() {}, nil
	}
	st := m.Status()
	if f.memoryMax > 0 && st.MemoryMax == 0 || f.pidsMax > 0 && st.PidsMax == 0 {
		m.Close()
		return nil, fmt.Errorf("--memory-max/--pids-max cannot be enforced: %s", st.NoLimits)
	}
	fields := []zap.Field{zap.String("dir", st.Dir), zap.Strings("controllers", st.Controllers), zap.Int64("memory_max", st.MemoryMax), zap.Int64("pids_max", st.PidsMax)}
	if st.Moved {
		fields = append(fields, zap.Bool("moved_self", true))
	}
	if st.Swept > 0 {
		fields = append(fields, zap.Int("swept_stale", st.Swept))
	}
	if st.NoLimits != "" {
		fields = append(fields, zap.String("limits_not_enforced", st.NoLimits))
	}
	log.Info("a cgroup per command", fields...)
	backend.Cgroups = m
	return m.Close, nil
}

// poolSizeFlag is --sandbox-pool: 0 to engine.MaxSandboxPool.
type poolSizeFlag int

func (p *poolSizeFlag) String() string { return strconv.Itoa(int(*p)) }

func (p *poolSizeFlag) Set(v string) error {
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 || n > engine.MaxSandboxPool {
		return fmt.Errorf("want 0 to %d helpers, got %q", engine.MaxSandboxPool, v)
	}
	*p = poolSizeFlag(n)
	return nil
}

// warmSandbox fills the backend's sandbox pool for srv's sandboxed
// commands, where this machine gives them namespaces of their own.
func warmSandbox(log *zap.Logger, backend *engine.LocalBackend, srv *executor.Server) {
	if backend.SandboxPool == 0 || !sandbox.Probe().MountNamespaces {
		return
	}
	backend.WarmSandbox(srv.Config().SandboxUser)
	log.Info("sandbox pool", zap.Int("helpers", backend.SandboxPool))
}

// uSizeFlag is sizeFlag for a uint64 field.
type uSizeFlag uint64

func (s *uSizeFlag) String() string { return strconv.FormatUint(uint64(*s), 10) }

func (s *uSizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = uSizeFlag(n)
	return nil
}

// sizeFlag is a byte count with an optional K, M, G or T suffix (powers of
// 1024).
type sizeFlag int64

func (s *sizeFlag) String() string { return strconv.FormatInt(int64(*s), 10) }

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	*s = sizeFlag(n)
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSuffix(strings.ToUpper(strings.TrimSpace(v)), "B")
	t = strings.TrimSuffix(t, "I")
	shift := 0
	if t != "" {
		switch t[len(t)-1] {
		case 'K':
			shift = 10
		case 'M':
			shift = 20
		case 'G':
			shift = 30
		case 'T':
			shift = 40
		}
		if shift > 0 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64>>shift {
		return 0, fmt.Errorf("%q is not a size (bytes, or with K, M, G or T)", v)
	}
	return n << shift, nil
}

// sandboxHelper is --sandbox-helper (executor serve and join).
var sandboxHelper string

// useSandboxHelper applies --sandbox-helper, or else an outpost-sandbox
// installed beside this binary; a helper of another build is refused and
// the executor re-executes itself, as without one.
func useSandboxHelper(log *zap.Logger) {
	path, explicit := sandboxHelper, sandboxHelper != ""
	if !explicit {
		exe, err := os.Executable()
		if err != nil {
			return
		}
		path = filepath.Join(filepath.Dir(exe), sandbox.HelperName)
		if _, err := os.Stat(path); err != nil {
			return
		}
	}
	if err := sandbox.UseHelper(path); err != nil {
		if explicit {
			log.Warn("not using the sandbox helper; re-executing outpost instead", zap.Error(err))
		} else {
			log.Info("not using the outpost-sandbox beside this binary; re-executing outpost instead", zap.Error(err))
		}
		return
	}
	log.Info("sandbox helper", zap.String("path", path))
}

func cmdExecutorServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost executor serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", executor.DefaultListenURL, "listen URL: ws://IP:PORT, stdio, tcp://HOST:PORT or unix:///path")
	wsAuth := addWSAuthFlags(fs)
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "directory for the executor's key (tcp:// and unix://)")
	authorized := fs.String("authorized-clients", "", "file of client public keys allowed to connect (tcp:// and unix://); default: any")
	cfg, backend := executorLimitFlags(fs)
	adminListen := fs.String("admin-listen", "", "serve /metrics, /livez and /readyz on HOST:PORT (off when empty)")
	handshakeTimeout := fs.Duration("handshake-timeout", transport.DefaultHandshakeTimeout, "tcp:// and unix://: how long a client may take, from connect, to finish its Noise handshake")
	firstByteTimeout := fs.Duration("first-byte-timeout", executor.DefaultFirstByteTimeout, "tcp:// and unix://: how long a new connection may stay silent before its handshake starts")
	maxFailed := fs.Int("max-failed-handshakes", executor.DefaultMaxFailedHandshakes, "tcp:// and unix://: failed, silent or slow handshakes per address per minute before the address is refused for the rest of the minute")
	maxHandshakes := fs.Int("max-handshakes", executor.DefaultMaxHandshakes, "tcp:// and unix://: connections still in their handshake, in all (the oldest idle ones make room)")
	maxPerAddr := fs.Int("max-handshakes-per-address", executor.DefaultMaxHandshakesPerAddress, "tcp:// and unix://: connections still in their handshake per address (IPv4, IPv6 /64, or unix peer uid)")
	var lf logFlags
	lf.register(fs)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	log, err := lf.build(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	defer log.Sync()
	cfg.Backend, cfg.Logger, cfg.Version = backend, log, shortVersion()
	// Its own key, and the socket clients reach it by, are hidden from
	// every sandbox.
	cfg.SandboxHidden = append(cfg.SandboxHidden, *stateDir)
	// tcp:// and unix:// (even malformed: ListenNative says what is wrong)
	// are the native transport; ws:// and stdio codex's.
	nativeURL, err := transport.ParseURL(*listen, transport.SchemeTCP, transport.SchemeUnix)
	native := err == nil || transport.URLErrorScheme(err) != ""
	if err == nil && nativeURL.Scheme == transport.SchemeUnix {
		cfg.SandboxHidden = append(cfg.SandboxHidden, filepath.Clean(nativeURL.Addr))
	}
	useSandboxHelper(log)
	closeCgroups, err := useCgroups(log, backend)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	defer closeCgroups()
	defer executorTracing(cfg, stderr)()
	adminStopping, stopAdmin, err := startExecutorAdmin(*adminListen, cfg, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	defer stopAdmin()
	srv, err := executor.NewServer(*cfg)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	warmSandbox(log, backend, srv)
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	shutdown := func() {
		adminStopping()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			log.Warn("shutdown: some processes were killed", zap.Error(err))
		}
	}
	announce := func(url string) {
		fmt.Fprintln(stdout, url)
		if f, ok := stdout.(*os.File); ok {
			f.Sync()
		}
	}
	if native {
		key, created, err := identity.LoadOrCreate(filepath.Join(*stateDir, "executor.key"))
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		nativeCfg := executor.NativeConfig{Key: key.Keypair(), HandshakeTimeout: *handshakeTimeout, FirstByteTimeout: *firstByteTimeout,
			MaxFailedHandshakes: *maxFailed, MaxHandshakes: *maxHandshakes, MaxHandshakesPerAddress: *maxPerAddr}
		if *authorized != "" {
			allow, err := identity.LoadAllowList(*authorized)
			if err != nil {
				fmt.Fprintln(stderr, "outpost:", err)
				return 2
			}
			nativeCfg.Authorize = func(peer []byte) error {
				var k identity.PublicKey
				copy(k[:], peer)
				if !allow.Allowed(k) {
					log.Info("refused a client key not in --authorized-clients", zap.String("client", k.Fingerprint()))
					return fmt.Errorf("client key %s is not authorised", k.Fingerprint())
				}
				return nil
			}
			log.Info("client allow-list loaded", zap.String("file", *authorized), zap.Int("keys", allow.Len()))
		}
		l, err := srv.ListenNative(*listen, nativeCfg)
		if err != nil {
			fmt.Fprintln(stderr, "outpost: listen:", err)
			return 1
		}
		url := l.URL() + "#" + key.PublicKey().Fingerprint()
		announce(url)
		log.Info("executor listening", zap.String("url", url), zap.String("fingerprint", key.PublicKey().Fingerprint()), zap.Bool("new_key", created))
		<-ctx.Done()
		log.Info("shutting down")
		l.StopAccepting()
		shutdown() // TERM, grace, KILL; clients get the exit events
		l.Close()
		return 0
	}
	lu, err := executor.ParseListenURL(*listen)
	if err != nil {
		var ue *executor.UnsupportedListenError
		if errors.As(err, &ue) {
			ue.Expect = "`ws://IP:PORT`, `stdio`, `tcp://HOST:PORT` or `unix:///path`"
		}
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	auth, err := wsAuth.resolve()
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	switch lu.Scheme {
	case "stdio":
		err := srv.ServeStdio(ctx, os.Stdin, stdout)
		if ctx.Err() != nil {
			log.Info("shutting down")
		}
		shutdown()
		if err != nil && !errors.Is(err, context.Canceled) {
			log.Error("stdio connection failed", zap.Error(err))
			return 1
		}
		return 0
	default:
		l, err := srv.ListenWS(lu.Addr, executor.WSConfig{Token: auth.Token, TokenSHA256: auth.TokenSHA256})
		if err != nil {
			fmt.Fprintln(stderr, "outpost: listen:", err)
			return 1
		}
		announce(l.URL())
		log.Info("executor listening", zap.String("url", l.URL()), zap.Bool("token", auth.Enabled()))
		<-ctx.Done()
		log.Info("shutting down")
		l.StopAccepting()
		shutdown() // TERM, grace, KILL; clients get the exit events
		l.Close()
		return 0
	}
}

// connectionToken reads the optional bearer token for the WebSocket front.
// CODEX_EXEC_SERVER_CONNECTION_TOKEN is honoured too, so a codex deployment
// works unchanged.
func connectionToken() (string, error) {
	for _, name := range []string{"OUTPOST_CONNECTION_TOKEN", "CODEX_EXEC_SERVER_CONNECTION_TOKEN"} {
		if v, ok := os.LookupEnv(name); ok {
			if strings.TrimSpace(v) == "" {
				return "", fmt.Errorf("%s is set but empty", name)
			}
			return v, nil
		}
	}
	return "", nil
}

// cmdDoctor prints what this machine can enforce and, with --sandbox,
// whether that policy is fully enforceable (exit 1 if not).
func cmdDoctor(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost executor doctor", flag.ContinueOnError)
	fs.SetOutput(stderr)
	mode := fs.String("sandbox", "workspace-write", "policy to check: read-only, workspace-write or full-access")
	flagChoices(fs, "sandbox", sandboxModes...)
	network := fs.Bool("network", false, "the policy allows network access")
	var memoryMax sizeFlag
	fs.Var(&memoryMax, "memory-max", "also check that a per-command memory limit can be enforced")
	pidsMax := fs.Int64("pids-max", 0, "also check that a per-command process limit can be enforced")
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	m, err := sandbox.ParseMode(*mode)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 2
	}
	caps := sandbox.Probe()
	for _, line := range caps.Report() {
		fmt.Fprintln(stdout, line)
	}
	cg := cgroup.ProbeMachine()
	for _, line := range cg.Lines() {
		fmt.Fprintln(stdout, line)
	}
	code := 0
	if err := caps.Check(sandbox.Policy{Mode: m, Network: *network}); err != nil {
		fmt.Fprintf(stdout, "policy %s (network %v): NOT enforceable: %v\n", m, *network, err)
		code = 1
	} else {
		fmt.Fprintf(stdout, "policy %s (network %v): enforceable\n", m, *network)
	}
	for _, l := range []struct {
		flag, controller string
		on               bool
	}{{"--memory-max", "memory", memoryMax > 0}, {"--pids-max", "pids", *pidsMax > 0}} {
		if !l.on {
			continue
		}
		switch {
		case cg.Unavailable != nil:
			fmt.Fprintf(stdout, "%s: NOT enforceable: %v\n", l.flag, cg.Unavailable)
			code = 1
		case !slices.Contains(cg.Controllers, l.controller):
			fmt.Fprintf(stdout, "%s: NOT enforceable: the %s controller is not available to %s\n", l.flag, l.controller, cg.Base)
			code = 1
		default:
			fmt.Fprintf(stdout, "%s: enforceable (if the executor has its cgroup to itself)\n", l.flag)
		}
	}
	return code
}
