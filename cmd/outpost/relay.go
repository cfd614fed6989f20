package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/transport"
)

type labelFlags map[string]string

func (l labelFlags) String() string { return fmt.Sprint(map[string]string(l)) }
func (l labelFlags) Set(v string) error {
	k, val, ok := strings.Cut(v, "=")
	if !ok || k == "" {
		return fmt.Errorf("want k=v, got %q", v)
	}
	l[k] = val
	return nil
}

// tokenStore opens the relay's token store — the one sf chooses (see
// relay_store.go); relay.db in stateDir when sf is nil or says nothing —
// creating a missing one (relay serve, token create). done closes it.
func tokenStore(stateDir string, sf *relayStoreFlags) (store *relay.Store, done func(), err error) {
	return openTokenStore(stateDir, sf, true)
}

// existingTokenStore opens the relay's token store for the commands
// that read or amend it (token ls and revoke, executors revoke): a missing
// state directory, database or etcd store is an error, never created.
func existingTokenStore(stateDir string, sf *relayStoreFlags) (store *relay.Store, done func(), err error) {
	return openTokenStore(stateDir, sf, false)
}

// formatKV prints labels as k=v,k=v sorted by key, or "-" when empty.
func formatKV(m map[string]string) string {
	if len(m) == 0 {
		return "-"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + m[k]
	}
	return strings.Join(parts, ",")
}

const relayInitUsage = `usage: outpost relay init [--state-dir DIR] [--advertise HOST:PORT]

Prepares a relay's state before its first start: creates the relay's key
(relay.key) and token database (relay.db) in --state-dir if they are
missing. An existing key is kept, never replaced, so init may run at every
start. It prints the relay's URL, outpost://HOST:PORT#<fingerprint>, with
--advertise (the address executors and clients dial), else the bare
fingerprint: executors and clients pin the relay by it, so it can be handed
out before the relay ever runs.

Flags:
`

// cmdRelayInit creates the relay's key and token database if missing and
// prints the fingerprint (or, with --advertise, the whole URL): a deployment
// can mint tokens and hand out the URL before the relay has started.
func cmdRelayInit(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost relay init", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "directory for the relay's key and token database")
	advertise := fs.String("advertise", "", "HOST:PORT executors and clients dial: print the full outpost:// URL")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), relayInitUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() != 0 {
		fs.Usage()
		return exitUsage
	}
	if *advertise != "" {
		if err := checkAdvertise(*advertise); err != nil {
			fmt.Fprintln(stderr, "outpost relay init: --advertise:", err)
			return exitUsage
		}
	}
	if *stateDir == "" {
		fmt.Fprintln(stderr, "outpost relay init: no home directory to default --state-dir to; give --state-dir")
		return exitUsage
	}
	keyPath := filepath.Join(*stateDir, "relay.key")
	key, created, err := identity.LoadOrCreate(keyPath)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	if _, _, err := tokenStore(*stateDir, nil); err != nil { // relay.db: nothing to close
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	fp := key.PublicKey().Fingerprint()
	if *advertise != "" {
		fmt.Fprintln(stdout, transport.RelayScheme+*advertise+"#"+fp)
	} else {
		fmt.Fprintln(stdout, fp)
	}
	if created {
		fmt.Fprintf(stderr, "relay key %s created (fingerprint %s)\n", keyPath, fp)
	} else {
		fmt.Fprintf(stderr, "relay key %s kept (fingerprint %s)\n", keyPath, fp)
	}
	return 0
}

// checkAdvertise accepts HOST:PORT that a client can dial: a host that is
// not a wildcard (0.0.0.0 or :: would send every client to itself) and a
// port from 1 to 65535.
func checkAdvertise(hp string) error {
	host, port, err := net.SplitHostPort(hp)
	if err != nil || strings.Contains(hp, "/") {
		return fmt.Errorf("want HOST:PORT (e.g. relay.example.net:7443 or [2001:db8::1]:7443), got %q", hp)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("port %q: want 1 to 65535", port)
	}
	if host == "" || isWildcardHost(host) {
		return fmt.Errorf("%q is not an address others can dial; name this machine (its DNS name or address)", hp)
	}
	if _, err := transport.ParseURL(transport.RelayScheme+hp+"#"+identity.PublicKey{1}.Fingerprint(), transport.SchemeRelay); err != nil {
		return fmt.Errorf("want HOST:PORT, got %q", hp)
	}
	return nil
}

// isWildcardHost reports whether host is an any-address (0.0.0.0, ::, or
// empty): fine to listen on, useless to dial from another machine.
func isWildcardHost(host string) bool {
	if host == "" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsUnspecified()
}

// advertisedAddr is the HOST:PORT to print for a listener bound to addr:
// advertise when given; addr itself when it names a host; for a wildcard
// listener this machine's hostname with the bound port, and substituted
// reports that the host was guessed.
func advertisedAddr(addr net.Addr, advertise string) (hp string, substituted bool) {
	if advertise != "" {
		return advertise, false
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil || !isWildcardHost(host) {
		return addr.String(), false
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		name = "localhost"
	}
	return net.JoinHostPort(name, port), true
}

// cmdRelayServe runs a relay.
func cmdRelayServe(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost relay serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "tcp://0.0.0.0:7443", "listen URL tcp://HOST:PORT")
	wsListen := fs.String("ws-listen", "", "also serve the relay over WebSocket: ws://HOST:PORT (for networks that pass only HTTP)")
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "directory for the relay's key and token database")
	storeFlags := addRelayStoreFlags(fs)
	var cf clusterFlags
	cf.register(fs)
	adminListen := fs.String("admin-listen", "", "serve /metrics, /livez, /readyz and /peers on HOST:PORT (off when empty)")
	handshakeTimeout := fs.Duration("handshake-timeout", transport.DefaultHandshakeTimeout, "how long a connection may take to finish its Noise handshake and send its first request")
	maxFailed := fs.Int("max-failed-handshakes", 20, "failed handshakes from one address within a minute before the relay refuses it for the rest of that minute")
	drainTimeout := fs.Duration("drain-timeout", 30*time.Second, "on SIGTERM, how long open client streams may run on before they are cut (executors are told to reconnect at once)")
	advertise := fs.String("advertise", "", "HOST:PORT executors and clients dial, for the printed URL (default: the listen address; this machine's hostname when it listens on all addresses)")
	var lf logFlags
	lf.register(fs)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	log, err := lf.build(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return exitUsage
	}
	lu, err := transport.ParseURL(*listen, transport.SchemeTCP)
	if err != nil {
		fmt.Fprintln(stderr, "outpost: --listen:", err)
		return exitUsage
	}
	if *advertise != "" {
		if err := checkAdvertise(*advertise); err != nil {
			fmt.Fprintln(stderr, "outpost: --advertise:", err)
			return exitUsage
		}
	}
	var wsAddr string
	if *wsListen != "" {
		wu, err := transport.ParseURL(*wsListen, transport.SchemeWS)
		if err == nil && wu.Path != "" {
			err = fmt.Errorf("%s: expected ws://HOST:PORT, without a path", *wsListen)
		}
		if err != nil {
			fmt.Fprintln(stderr, "outpost: --ws-listen:", err)
			return exitUsage
		}
		wsAddr = wu.Addr
	}
	key, _, err := identity.LoadOrCreate(filepath.Join(*stateDir, "relay.key"))
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	// etcdClient (nil on bbolt) is the store's etcd client, shared by the
	// cluster code; closed after the store, when serve returns.
	tokens, etcdClient, err := openRelayStore(*stateDir, storeFlags, true)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	defer closeRelayStore(tokens, etcdClient)
	// An etcd store makes the relay a member of the cluster on that etcd.
	var cluster *relay.ClusterConfig
	if etcdClient != nil {
		so, _, _ := storeFlags.options()
		if cluster, err = cf.config(etcdClient, so.Prefix, lu.Addr, *advertise); err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return exitUsage
		}
	}
	srv, err := relay.NewServer(relay.Config{Key: key.Keypair(), Tokens: tokens, Logger: log, HandshakeTimeout: *handshakeTimeout, MaxFailedHandshakes: *maxFailed, Cluster: cluster})
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	// Leaving the cluster takes this relay's member entry and its
	// executors' presence out of etcd at once (before the store closes).
	defer srv.Close()
	// Both binds wait briefly for a relay being replaced here to free the
	// port (relay_restart.go).
	stopAdmin, err := bindRetrying("--admin-listen", stderr, func() (func(), error) {
		_, stop, err := startRelayAdmin(*adminListen, srv, stderr)
		return stop, err
	})
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	defer stopAdmin()
	// A cluster's member listens once it holds its lease: before, it would
	// refuse every join and connect of the storm a restart brings.
	select {
	case <-srv.Attached():
	case <-time.After(relay.DefaultClusterRequest):
		log.Warn("etcd has not answered; listening detached from the cluster (joins and connects are refused until it answers)")
	}
	ln, err := bindRetrying("--listen", stderr, func() (*relay.Listener, error) { return srv.Listen(lu.Addr) })
	if err != nil {
		fmt.Fprintln(stderr, "outpost: listen:", err)
		return 1
	}
	// The printed URL is what executors and clients are given, so it must
	// name an address they can dial, never the wildcard listened on.
	hp, guessed := advertisedAddr(ln.Addr(), *advertise)
	url := transport.RelayScheme + hp + "#" + key.PublicKey().Fingerprint()
	fmt.Fprintln(stdout, url)
	if guessed {
		fmt.Fprintf(stderr, "outpost: listening on all addresses (%s); the URL above names this machine by its hostname — if executors and clients reach it by another name or address, give that with --advertise HOST:PORT (the #fingerprint stays the same)\n", ln.Addr())
	}
	var wsl *relay.WSListener
	if wsAddr != "" {
		wl, err := bindRetrying("--ws-listen", stderr, func() (*relay.WSListener, error) { return srv.ListenWS(wsAddr) })
		if err != nil {
			fmt.Fprintln(stderr, "outpost: listen:", err)
			return 1
		}
		defer wl.Close()
		wsl = wl
		// A wildcard ws listener is named like the tcp one: by the
		// advertised host when there is one, else this machine's hostname.
		whp, _ := advertisedAddr(wl.Addr(), "")
		if h, _, err := net.SplitHostPort(*advertise); err == nil && whp != wl.Addr().String() {
			_, port, _ := net.SplitHostPort(wl.Addr().String())
			whp = net.JoinHostPort(h, port)
		}
		fmt.Fprintln(stdout, transport.RelayWSScheme+whp+"#"+key.PublicKey().Fingerprint())
	}
	if f, ok := stdout.(*os.File); ok {
		f.Sync()
	}
	log.Info("relay listening", zap.String("url", url), zap.String("listen", ln.Addr().String()))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	defer signal.Stop(sigs)
	sig := <-sigs
	log.Info("relay shutting down", zap.String("signal", sig.String()), zap.Duration("drain_timeout", *drainTimeout))
	// Drain: no new connections, executors told to reconnect, open client
	// streams given --drain-timeout (a second signal cuts it short). The
	// ports close first, the admin one too, so a relay replacing this one
	// on the same host can bind them while this one drains
	// (relay_restart.go).
	stopAdmin()
	ln.StopAccepting()
	if wsl != nil {
		wsl.StopAccepting()
	}
	dctx, cancel := context.WithTimeout(context.Background(), *drainTimeout)
	defer cancel()
	go func() {
		select {
		case <-sigs:
			cancel()
		case <-dctx.Done():
		}
	}()
	if err := srv.Drain(dctx); err != nil {
		log.Warn("relay drain cut short", zap.Error(err))
	} else {
		log.Info("relay drained")
	}
	ln.Close()
	return 0
}

// cmdToken manages the relay's tokens (create, ls, revoke).
func cmdToken(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprintln(stderr, "usage: outpost token create|ls|revoke [flags]")
		return exitUsage
	}
	fs := flag.NewFlagSet("outpost token "+args[0], flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "the relay's state directory")
	storeFlags := addRelayStoreFlags(fs)
	switch args[0] {
	case "create":
		join := fs.Bool("join", false, "a join token (for executor join)")
		cli := fs.Bool("client", false, "a client token (for outpost exec --relay)")
		ttl := fs.Duration("ttl", 0, "expiry (0: never)")
		uses := fs.Int("uses", 0, "how many times it may be redeemed (0: unlimited)")
		executors := fs.String("executors", "*", "client tokens: executor ids it may reach (comma-separated globs)")
		labels := labelFlags{}
		fs.Var(labels, "label", "join tokens: k=v label for the executor (repeatable)")
		if code, ok := parseArgs(fs, args[1:], stdout); !ok {
			return code
		}
		if *join == *cli {
			fmt.Fprintln(stderr, "outpost token create: say --join or --client")
			return exitUsage
		}
		kind := relay.TokenClient
		if *join {
			kind = relay.TokenJoin
		}
		store, done, err := tokenStore(*stateDir, storeFlags)
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		defer done()
		secret, tok, err := store.Create(kind, relay.CreateOptions{TTL: *ttl, Uses: *uses, Labels: labels, Executors: *executors})
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		fmt.Fprintln(stdout, secret)
		fmt.Fprintf(stderr, "token %s (%s) created; the secret above is shown only once\n", tok.ID, tok.Kind)
		return 0
	case "ls":
		if code, ok := parseArgs(fs, args[1:], stdout); !ok {
			return code
		}
		store, done, err := existingTokenStore(*stateDir, storeFlags)
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		defer done()
		toks, err := store.List()
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "ID\tKIND\tSTATE\tUSED/MAX\tEXPIRES\tSCOPE")
		now := time.Now()
		for _, t := range toks {
			uses := fmt.Sprintf("%d/∞", t.Used)
			if t.Uses > 0 {
				uses = fmt.Sprintf("%d/%d", t.Used, t.Uses)
			}
			exp := "never"
			if !t.ExpiresAt.IsZero() {
				exp = t.ExpiresAt.Format(time.RFC3339)
			}
			// SCOPE: the executors a client token reaches, the labels a
			// join token gives.
			scope := t.Executors
			if t.Kind == relay.TokenJoin {
				scope = formatKV(t.Labels)
			} else if strings.TrimSpace(scope) == "" {
				scope = "-"
			}
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", t.ID, t.Kind, t.State(now), uses, exp, scope)
		}
		w.Flush()
		return 0
	case "revoke":
		if code, ok := parseArgs(fs, args[1:], stdout); !ok {
			return code
		}
		if fs.NArg() != 1 {
			fmt.Fprintln(stderr, "usage: outpost token revoke [--state-dir DIR] ID")
			return exitUsage
		}
		store, done, err := existingTokenStore(*stateDir, storeFlags)
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		defer done()
		if err := store.Revoke(fs.Arg(0)); err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return 1
		}
		return 0
	}
	fmt.Fprintf(stderr, "outpost token: unknown command %q\n", args[0])
	return exitUsage
}

// cmdExecutorJoin joins a relay and serves the clients it brings.
func cmdExecutorJoin(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost executor join", flag.ContinueOnError)
	fs.SetOutput(stderr)
	relayURL := fs.String("relay", "", "relay URL outpost://HOST:PORT#<fingerprint>")
	// The environment is read after parsing, so that usage (which prints
	// defaults) never shows the token.
	token := fs.String("token", "", "join token (needed the first time; default $OUTPOST_JOIN_TOKEN, never printed)")
	hostname, _ := os.Hostname()
	id := fs.String("id", hostname, "executor id")
	labels := labelFlags{}
	fs.Var(labels, "label", "k=v label (repeatable)")
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "directory for the executor's key")
	authorized := fs.String("authorized-clients", "", "file of client public keys allowed to run commands; default: any the relay brings")
	adminListen := fs.String("admin-listen", "", "serve /metrics, /livez and /readyz on HOST:PORT (off when empty)")
	handshakeTimeout := fs.Duration("handshake-timeout", transport.DefaultHandshakeTimeout, "how long a relayed client may take, from the relay's splice, to finish its Noise handshake")
	firstByteTimeout := fs.Duration("first-byte-timeout", executor.DefaultFirstByteTimeout, "how long a relayed client's stream may stay silent before its handshake starts")
	maxHandshakes := fs.Int("max-handshakes", executor.DefaultMaxHandshakes, "relayed clients still in their handshake, in all (the oldest idle ones make room)")
	maxPerSession := fs.Int("max-handshakes-per-session", executor.DefaultMaxHandshakesPerAddress, "relayed clients still in their handshake per relay session (every relayed client arrives from the relay)")
	relayConns := fs.Int("relay-connections", 0, fmt.Sprintf("relay sessions to keep, each on another relay of a cluster: 1 to %d, or 0 for automatic (default 2 when the relay is a cluster, 1 otherwise)", executor.MaxRelayConnections))
	cfg, backend := executorLimitFlags(fs)
	var lf logFlags
	lf.register(fs)
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if *relayURL == "" {
		fmt.Fprintln(stderr, "outpost executor join: --relay is required")
		return exitUsage
	}
	if *relayConns < 0 || *relayConns > executor.MaxRelayConnections {
		fmt.Fprintf(stderr, "outpost executor join: --relay-connections must be 0 (automatic) to %d\n", executor.MaxRelayConnections)
		return exitUsage
	}
	if *token == "" {
		*token = os.Getenv("OUTPOST_JOIN_TOKEN")
	}
	log, err := lf.build(stderr)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return exitUsage
	}
	key, _, err := identity.LoadOrCreate(filepath.Join(*stateDir, "executor.key"))
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	cfg.Backend, cfg.Logger, cfg.Version = backend, log, shortVersion()
	cfg.SandboxHidden = append(cfg.SandboxHidden, *stateDir) // its key, hidden from every sandbox
	useSandboxHelper(log)
	closeCgroups, err := useCgroups(log, backend)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return exitUsage
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
		return 1
	}
	warmSandbox(log, backend, srv)
	joinCfg := executor.JoinConfig{RelayURL: *relayURL, Key: key.Keypair(), ID: *id, Token: *token, Labels: labels, Version: shortVersion(),
		HandshakeTimeout: *handshakeTimeout, FirstByteTimeout: *firstByteTimeout, MaxHandshakes: *maxHandshakes, MaxHandshakesPerAddress: *maxPerSession,
		RelayConnections: *relayConns}
	if *authorized != "" {
		allow, err := identity.LoadAllowList(*authorized)
		if err != nil {
			fmt.Fprintln(stderr, "outpost:", err)
			return exitUsage
		}
		joinCfg.Authorize = func(peer []byte) error {
			var k identity.PublicKey
			copy(k[:], peer)
			if !allow.Allowed(k) {
				return fmt.Errorf("client key %s is not authorised", k.Fingerprint())
			}
			return nil
		}
	}
	fmt.Fprintf(stdout, "executor %s (key %s) joining %s\n", *id, key.PublicKey().Fingerprint(), *relayURL)
	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// The relay session outlives the signal until Shutdown has TERMed the
	// children and sent their clients the exit events.
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	joinDone := make(chan error, 1)
	go func() { joinDone <- srv.Join(ctx, joinCfg) }()
	select {
	case err = <-joinDone:
	case <-sigCtx.Done():
		log.Info("shutting down", zap.String("executor", *id))
	}
	adminStopping()
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(sctx); serr != nil {
		log.Warn("shutdown", zap.Error(serr))
	}
	leave()
	if sigCtx.Err() != nil {
		<-joinDone
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "outpost executor join:", err)
		return 1
	}
	return 0
}

// cmdExecutorsLs lists the executors a client token may reach.
func cmdExecutorsLs(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost executors ls", flag.ContinueOnError)
	fs.SetOutput(stderr)
	relayURL := fs.String("relay", "", "relay URL (default $OUTPOST_RELAY or \"relay =\" in the config file)")
	token := fs.String("token", "", "client token (default $OUTPOST_TOKEN or \"token =\" in the config file; never printed)")
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	*relayURL, *token = orDefault(*relayURL, "OUTPOST_RELAY", "relay"), orDefault(*token, "OUTPOST_TOKEN", "token")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := transport.ParseURL(*relayURL, relaySchemes...); err != nil {
		fmt.Fprintln(stderr, "outpost executors ls: --relay:", err)
		return exitUsage
	}
	list, err := client.ListExecutors(ctx, *relayURL, client.Config{Token: *token})
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return dialExit(err)
	}
	// A cluster says which of its relays each executor is joined to.
	clustered := slices.ContainsFunc(list, func(e protocol.RelayExecutor) bool { return len(e.Relays) > 0 })
	w := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	if clustered {
		fmt.Fprintln(w, "ID\tFINGERPRINT\tCONNECTED SINCE\tVERSION\tRELAYS\tLABELS")
	} else {
		fmt.Fprintln(w, "ID\tFINGERPRINT\tCONNECTED SINCE\tVERSION\tLABELS")
	}
	for _, e := range list {
		if clustered {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%v\n", e.ID, e.Fingerprint, time.UnixMilli(e.ConnectedSince).Format(time.RFC3339), e.Version, strings.Join(e.Relays, ","), e.Labels)
			continue
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%v\n", e.ID, e.Fingerprint, time.UnixMilli(e.ConnectedSince).Format(time.RFC3339), e.Version, e.Labels)
	}
	w.Flush()
	return 0
}

const executorsRevokeUsage = `usage: outpost executors revoke [--state-dir DIR] ID

Revokes executor ID's key for good and unbinds the id. Run it on the
relay's machine with the relay's --state-dir; the relay may be running.
The key can never join this relay again, under any id (other ids bound to
it are unbound too), and a running relay closes the key's joined sessions
within about a second.

Revoke when an executor.key may be stolen: the relay logs "duplicate
executor join refused" and counts outpost_relay_duplicate_joins_total when a
second holder of the key tries to join while the executor is up. To bring
the executor back, remove its executor.key (a new key is made at start),
create a join token (outpost token create --join) and join again with it;
clients that pinned the old key must drop its line from known_executors.

Flags:
`

// cmdExecutorsRevoke unbinds an executor id and revokes its key, in the
// relay's store; a running relay notices within RevocationPoll.
func cmdExecutorsRevoke(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("outpost executors revoke", flag.ContinueOnError)
	fs.SetOutput(stderr)
	stateDir := fs.String("state-dir", identity.DefaultStateDir(), "the relay's state directory")
	storeFlags := addRelayStoreFlags(fs)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), executorsRevokeUsage)
		fs.PrintDefaults()
	}
	if code, ok := parseArgs(fs, args, stdout); !ok {
		return code
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return exitUsage
	}
	id := fs.Arg(0)
	store, done, err := existingTokenStore(*stateDir, storeFlags)
	if err != nil {
		fmt.Fprintln(stderr, "outpost:", err)
		return 1
	}
	defer done()
	rev, err := store.RevokeExecutor(id)
	if err != nil {
		fmt.Fprintf(stderr, "outpost executors revoke %s: %v\n", id, err)
		return 1
	}
	fp := identity.PublicKey(rev.Key).Fingerprint()
	fmt.Fprintf(stdout, "revoked key %s of executor %s\n", fp, strings.Join(rev.IDs, ", "))
	fmt.Fprintf(stderr, "the key can never join this relay again; a running relay disconnects it within %v.\n"+
		"To rejoin: remove executor.key on the executor, create a join token (outpost token create --join) and join with it;\n"+
		"clients that pinned %s must drop its line from known_executors.\n", relay.DefaultRevocationPoll+time.Second, fp)
	return 0
}
