package client

import (
	"context"
	"errors"
	"fmt"
	"go.opentelemetry.io/otel/trace"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// Config configures Dial. The zero value is usable: Dial fills every
// zero field from DefaultConfig.
type Config struct {
	// ClientName is sent in initialize (default "outpost").
	ClientName string
	// Token is the bearer token for ws:// executors, and the client token
	// for executors reached through a relay (default "": none).
	Token string
	// Executor names the executor to reach through an outpost:// relay
	// (required for relay URLs only).
	Executor string

	// Key is this client's static key for tcp:// and unix:// executors and
	// relays. Zero: loaded from (or created in) KeyFile.
	Key identity.Key
	// KeyFile is where Key is kept when it is zero (default
	// <config dir>/client.key).
	KeyFile string
	// KnownExecutors is the trust-on-first-use pin file (default
	// <config dir>/known_executors). Pin, or a #fingerprint in the URL,
	// overrides it.
	KnownExecutors string
	// Pin is the executor's key fingerprint, pinned out of band (default
	// "": none).
	Pin string
	// NoTOFU refuses executors whose key is not pinned, instead of pinning
	// the key presented on first contact.
	NoTOFU bool
	// OnPin, if set, is called each time trust on first use records a key
	// in the KnownExecutors file: with the address it is pinned under (a
	// direct executor's URL without the fingerprint, or the relay's URL
	// and "/" and the executor id), the key, and the file. It is not
	// called for a key already on record, nor for a key pinned by the URL
	// or Pin. A program can thus say what it trusted, as ssh does ("added
	// to the list of known hosts"). It runs on the dialing goroutine,
	// after the pin is written.
	OnPin func(addr string, key identity.PublicKey, file string)

	// Mux configures the multiplexer on the native transport (default
	// transport.DefaultMuxConfig()).
	Mux transport.MuxConfig
	// RecoveryTimeout bounds how long a dropped connection is retried
	// (default 25 s, inside the executor's detached TTL).
	RecoveryTimeout time.Duration
	// NoResume fails processes when the connection drops, instead of
	// reconnecting.
	NoResume bool
	// OfflineGrace is how long a relay may report the executor offline
	// while reconnecting before its processes fail (default 5 s: enough
	// for executors to rejoin a restarted relay).
	OfflineGrace time.Duration
	// NoEarlyData keeps the first requests of a connection to a pinned
	// tcp:// or unix:// executor out of the Noise handshake's first
	// message: they then wait one round trip for the handshake. Early data
	// saves that round trip, and the executor never runs it twice (it
	// refuses a replayed message 1), but it is not forward secret: whoever
	// later steals the executor's static key can decrypt a recorded
	// initialize and process/start (argv, environment). PROTOCOL.md
	// section 2.7.
	NoEarlyData bool
	// TracerProvider, if set, records outpost.connect and process/start
	// spans and passes their W3C trace context to the executor inside the
	// encrypted channel, so its spans join the caller's trace.
	TracerProvider trace.TracerProvider
}

// DefaultConfig returns the default configuration. Its KeyFile and
// KnownExecutors are in identity.DefaultConfigDir() as it is now.
func DefaultConfig() Config {
	dir := identity.DefaultConfigDir()
	return Config{
		ClientName:      "outpost",
		KeyFile:         filepath.Join(dir, "client.key"),
		KnownExecutors:  filepath.Join(dir, "known_executors"),
		Mux:             transport.DefaultMuxConfig(),
		RecoveryTimeout: 25 * time.Second,
		OfflineGrace:    5 * time.Second,
	}
}

// withDefaults fills every zero field that has a default from
// DefaultConfig; the rest is left to Validate.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.ClientName == "" {
		c.ClientName = d.ClientName
	}
	if c.KeyFile == "" {
		c.KeyFile = d.KeyFile
	}
	if c.KnownExecutors == "" {
		c.KnownExecutors = d.KnownExecutors
	}
	if c.Mux == (transport.MuxConfig{}) {
		c.Mux = d.Mux
	}
	if c.RecoveryTimeout == 0 {
		c.RecoveryTimeout = d.RecoveryTimeout
	}
	if c.OfflineGrace == 0 {
		c.OfflineGrace = d.OfflineGrace
	}
	return c
}

// Validate reports the first invalid field. It takes the configuration
// as it is: a zero field is invalid here, though Dial would fill it.
func (c Config) Validate() error {
	switch {
	case c.ClientName == "":
		return errors.New("client: ClientName is required")
	case c.Key == (identity.Key{}) && c.KeyFile == "":
		return errors.New("client: KeyFile is required when Key is zero")
	case c.KnownExecutors == "":
		return errors.New("client: KnownExecutors is required")
	}
	if _, err := c.pin(); err != nil {
		return fmt.Errorf("client: Pin: %w", err)
	}
	if err := c.Mux.Validate(); err != nil {
		return fmt.Errorf("client: Mux: %w", err)
	}
	switch {
	case c.RecoveryTimeout <= 0:
		return errors.New("client: RecoveryTimeout must be positive")
	case c.OfflineGrace <= 0:
		return errors.New("client: OfflineGrace must be positive")
	}
	return nil
}

// ready is cfg with its zero fields filled, validated: what Dial and
// ListExecutors work with.
func (c Config) ready() (Config, error) {
	c = c.withDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// Dial connects to an executor (the URL is parsed by transport.ParseURL):
//
//	tcp://HOST:PORT[#fingerprint]      Noise + mux + msgpack (native)
//	unix:///path[#fingerprint]         the same over a Unix socket
//	ws://IP:PORT                       codex's JSON-RPC lite (plaintext; loopback)
//	stdio:///path/to/outpost           spawns "outpost executor serve --listen stdio"
//	outpost://HOST:PORT#fingerprint    through a relay (relay/relayclient), to Config.Executor with Config.Token
//	outpost+ws://HOST:PORT#fingerprint the same, the relay reached over WebSocket
//
// A relay URL may list several relays of a cluster,
// outpost://HOST1:PORT,HOST2:PORT#fingerprint: each connection, the first
// and every resume, goes through the first that takes it, in the order
// written, after the relay that took the last one; the members a relay of
// a cluster names in its answer are tried after them (dial_relays.go).
//
// cfg is validated, its zero fields filled from DefaultConfig.
func Dial(ctx context.Context, url string, cfg Config) (*Remote, error) {
	dial, cfg, err := dialerFor(url, cfg)
	if err != nil {
		return nil, err
	}
	return newRemote(ctx, url, dial, cfg)
}

// DialStart is Dial then StartProcess in one round trip fewer: it sends
// process/start right behind initialize, without waiting for its answer,
// and — to a tcp:// or unix:// executor whose key is pinned — both inside
// the Noise handshake's first message as early data (see
// Config.NoEarlyData). A cold start then costs TCP's round trip and one
// more.
//
// When the connection or initialize fails, it returns a nil Remote and the
// error (the executor runs nothing on a connection whose initialize
// failed). When only the start is refused, it returns the connected
// Remote, a nil Process and the start's error: the caller closes the
// Remote.
func DialStart(ctx context.Context, url string, cfg Config, params protocol.ExecParams) (*Remote, *Process, error) {
	dial, cfg, err := dialerFor(url, cfg)
	if err != nil {
		return nil, nil, err
	}
	r, p, _, err := newRemoteStart(ctx, url, dial, cfg, params)
	return r, p, err
}

// dialerFor parses url and readies cfg, and returns how to connect.
func dialerFor(url string, cfg Config) (dialFunc, Config, error) {
	u, err := transport.ParseURL(url)
	if err != nil {
		return nil, cfg, err
	}
	if cfg, err = cfg.ready(); err != nil {
		return nil, cfg, err
	}
	var dial dialFunc
	switch u.Scheme {
	case transport.SchemeTCP, transport.SchemeUnix:
		dial, err = nativeDialer(u, cfg)
	case transport.SchemeWS:
		dial = func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
			rpc, err := DialWS(ctx, url, DialOptions{Token: cfg.Token}, func(m string, p transport.Params) { route(m, p, false) })
			if err != nil {
				return nil, err
			}
			return &conn{rpc: rpc, close: rpc.Close, shared: true, json: true}, nil
		}
	case transport.SchemeStdio:
		dial = stdioDialer(u.Addr)
	default: // a relay
		dial, err = relayDialer(u, cfg)
	}
	return dial, cfg, err
}

// DialConn connects to an executor over connections that dial opens,
// speaking the native protocol (mux and msgpack) on them directly. No
// Noise handshake is made, so each connection must already be private and
// authenticated: an in-process pipe to an executor.Server's ServeMux (as
// package local does), or a channel the caller secured itself. name is the
// Remote's URL, in its errors and spans. cfg is validated, its zero fields
// filled from DefaultConfig; its key and pin fields are not used. When a
// connection drops, dial is called again to resume, unless cfg.NoResume.
func DialConn(ctx context.Context, name string, dial func(context.Context) (net.Conn, error), cfg Config) (*Remote, error) {
	cfg, err := cfg.ready()
	if err != nil {
		return nil, err
	}
	muxCfg := cfg.Mux
	return newRemote(ctx, name, func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		nc, err := dial(ctx)
		if err != nil {
			return nil, err
		}
		return muxConn(nc, muxCfg, route)
	}, cfg)
}

// nativeDialer prepares the Noise identity and pins for tcp:// and unix://.
func nativeDialer(u transport.URL, cfg Config) (dialFunc, error) {
	pinned, err := cfg.pin()
	if err != nil {
		return nil, err
	}
	if pinned == nil && u.HasKey() {
		pinned = &u.Key
	}
	key, err := cfg.clientKey()
	if err != nil {
		return nil, err
	}
	var known *identity.KnownExecutors
	if pinned == nil {
		if known, err = cfg.knownExecutors(); err != nil {
			return nil, err
		}
	}
	muxCfg := cfg.Mux
	instances := openEarlyInstances(cfg.KnownExecutors) // early data: client/early_instances.go
	return func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		raw, err := u.Dial(ctx)
		if err != nil {
			return nil, err
		}
		// The handshake waits for the first requests (conn.launch), to
		// carry them as early data in IK message 1.
		ec := newEarlyConn(raw)
		c, err := muxConn(ec, muxCfg, route)
		if err != nil {
			raw.Close()
			return nil, err
		}
		// early data: the executor instance to name (client/early_instances.go)
		slot := earlySlot{store: instances, addr: u.Base(), pinned: pinned, known: known}
		c.launch = func(ctx context.Context) error {
			return ec.launch(slot, !cfg.NoEarlyData, func(payload []byte) (*transport.NoiseConn, error) {
				return handshake(ctx, raw, key, u, pinned, known, cfg.NoTOFU, cfg.OnPin, payload)
			})
		}
		return c, nil
	}, nil
}

// pin is Config.Pin's key, nil when it is empty.
func (c Config) pin() (*identity.PublicKey, error) {
	if c.Pin == "" {
		return nil, nil
	}
	k, err := identity.ParsePublicKey(c.Pin)
	if err != nil {
		return nil, err
	}
	return &k, nil
}

// clientKey is Key, or the key in KeyFile (created if there is none).
func (c Config) clientKey() (identity.Key, error) {
	if c.Key != (identity.Key{}) {
		return c.Key, nil
	}
	key, _, err := identity.LoadOrCreate(c.KeyFile)
	if err != nil {
		return identity.Key{}, fmt.Errorf("client key: %w", err)
	}
	return key, nil
}

// knownExecutors opens the KnownExecutors pin file.
func (c Config) knownExecutors() (*identity.KnownExecutors, error) {
	return identity.OpenKnownExecutors(c.KnownExecutors)
}

// relayDialer reaches an executor through a relay. When the client knows
// the executor's key already (Config.Pin, or the known executors file) it
// makes the start of its own Noise IK handshake with the executor first
// and sends it inside its relay/connect, in its handshake with the relay
// (relayclient.ConnectEarly): one round trip to the executor brings the
// relay's answer and the executor's, and the connection then carries the
// end-to-end channel raw. Otherwise (first contact), or with a relay that
// predates that, it takes the mux path: a relayclient connection,
// relay/connect, then — inside the spliced stream — its own handshake.
// On first contact the executor's key comes from the relay's directory
// and is recorded.
//
// Each connection is made through one relay of a list (relayCandidates,
// dial_relays.go): the URL's addresses, the cluster's members the relays
// name, the last relay that worked first. The key is pinned under the
// URL as given (its Base), whichever relay carried the connection.
func relayDialer(u transport.URL, cfg Config) (dialFunc, error) {
	if cfg.Executor == "" {
		return nil, errors.New("a relay URL needs the executor's id (Config.Executor)")
	}
	key, err := cfg.clientKey()
	if err != nil {
		return nil, err
	}
	pinned, err := cfg.pin()
	if err != nil {
		return nil, err
	}
	known, err := cfg.knownExecutors()
	if err != nil {
		return nil, err
	}
	pinAddr := u.Base() + "/" + cfg.Executor
	muxCfg := cfg.Mux
	// innerConfig is the client's end-to-end handshake with the executor.
	innerConfig := func(exKey *identity.PublicKey) transport.NoiseConfig {
		return transport.NoiseConfig{Static: key.Keypair(), Purpose: transport.PurposeExec, PeerStatic: exKey[:]}
	}
	// innerFailed explains a refused end-to-end handshake: a pin that is
	// not the key the relay's directory names.
	innerFailed := func(err error, exKey *identity.PublicKey, fromFile bool, directory identity.PublicKey) error {
		if errors.Is(err, transport.ErrHandshakeRefused) && directory != *exKey {
			if fromFile {
				return &identity.KeyMismatchError{Addr: pinAddr, Pinned: *exKey, Presented: directory, File: known.Path()}
			}
			return fmt.Errorf("%w: executor %s: pinned %s (by Config.Pin), the relay reports %s", ErrPinMismatch, pinAddr, exKey.Fingerprint(), directory.Fingerprint())
		}
		return fmt.Errorf("executor %s: %w", pinAddr, err)
	}
	var legacyOnly atomic.Bool // the relay predates requests in its handshake
	relays := newRelayCandidates(u)
	// once connects through the relay at ru; more: other relays are left
	// to try, so reaching this one is bounded (transport.AddrDialTimeout).
	once := func(ctx context.Context, ru transport.URL, more bool, route func(string, transport.Params, bool)) (*conn, error) {
		opts := relayclient.Options{Mux: muxCfg, OnConnect: relays.heard}
		if more {
			opts.DialTimeout = transport.AddrDialTimeout
		}
		exKey, fromFile := pinned, false
		if exKey == nil {
			if k, ok := known.Lookup(pinAddr); ok {
				exKey, fromFile = &k, true
			}
		}
		if !legacyOnly.Load() && (exKey != nil || !cfg.NoTOFU) {
			var offer *transport.NoiseIKOffer
			var early []byte
			if exKey != nil {
				if offer, err = transport.NewNoiseIKOffer(innerConfig(exKey)); err != nil {
					return nil, err
				}
				early = offer.Bytes()
			}
			// First contact: pin the key the relay's directory names and
			// send the handshake to it in the first record.
			first := func(directory identity.PublicKey) ([]byte, error) {
				if err := known.Pin(pinAddr, directory); err != nil {
					return nil, err
				}
				if cfg.OnPin != nil {
					cfg.OnPin(pinAddr, directory, known.Path())
				}
				exKey = &directory
				var err error
				if offer, err = transport.NewNoiseIKOffer(innerConfig(exKey)); err != nil {
					return nil, err
				}
				return offer.Bytes(), nil
			}
			raw, directory, err := relayclient.ConnectEarly(ctx, ru.String(), key.Keypair(), opts, cfg.Executor, cfg.Token, early, first)
			switch {
			case err == nil:
				inner, err := offer.Finish(ctx, raw)
				if err != nil {
					raw.Close()
					return nil, innerFailed(err, exKey, fromFile, directory)
				}
				return muxConn(inner, muxCfg, route)
			case errors.Is(err, relayclient.ErrNoHandshakeRequests):
				legacyOnly.Store(true) // and take the mux path below
			default:
				return nil, err
			}
		}
		rc, err := relayclient.Dial(ctx, ru.String(), key.Keypair(), opts)
		if err != nil {
			return nil, err
		}
		fail := func(err error) (*conn, error) { rc.Close(); return nil, err }
		st, directory, err := rc.Connect(ctx, cfg.Executor, cfg.Token)
		if err != nil {
			return fail(err)
		}
		if exKey == nil {
			if cfg.NoTOFU {
				return fail(fmt.Errorf("executor %s (key %s): %w", pinAddr, directory.Fingerprint(), ErrNotPinned))
			}
			if err := known.Pin(pinAddr, directory); err != nil {
				return fail(err)
			}
			exKey = &directory
			if cfg.OnPin != nil {
				cfg.OnPin(pinAddr, directory, known.Path())
			}
		}
		inner, err := transport.NoiseInitiator(ctx, st, innerConfig(exKey))
		if err != nil {
			return fail(innerFailed(err, exKey, fromFile, directory))
		}
		c, err := muxConn(inner, muxCfg, route)
		if err != nil {
			return fail(err)
		}
		inClose := c.close
		c.close = func() error { err := inClose(); rc.Close(); return err }
		go func() {
			<-rc.Done()
			c.rpc.Close()
		}()
		return c, nil
	}
	// A relay behind one name (DNS, a load balancer) may die while a
	// connection is being made through it — a relay of a cluster killed,
	// restarted or drained — and the next connection reaches another: a
	// connection lost before the session exists is made again, at most
	// relayDialAttempts times, so no new command fails for it. Each
	// attempt goes through the relays in order until one answers
	// (nextRelay); the relay that takes the connection goes first next
	// time.
	return func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		delay := relayRedialDelay
		for attempt := 1; ; attempt++ {
			var err error
			cands := relays.order()
			for i, ru := range cands {
				var c *conn
				if c, err = once(ctx, ru, i < len(cands)-1, route); err == nil {
					relays.worked(ru.Addr)
					return c, nil
				}
				if !nextRelay(ctx, err) {
					break
				}
			}
			if attempt == relayDialAttempts || !redialable(ctx, err) {
				return nil, err
			}
			t := time.NewTimer(delay)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, err
			case <-t.C:
			}
			delay *= 3
		}
	}, nil
}

// relayDialAttempts and relayRedialDelay bound the connection attempts of
// one dial through a relay (50 ms, then 150 ms between them).
const (
	relayDialAttempts = 3
	relayRedialDelay  = 50 * time.Millisecond
)

// redialable says whether a failed connection through a relay may succeed
// if made again at once: a connection that broke, not an answer. A relay's
// refusal (kinds; an offline executor is retried by the caller's own
// grace), a key that is not the pinned one and the caller's deadline are
// answers.
func redialable(ctx context.Context, err error) bool {
	var refusal *protocol.Error
	var relayKey *relayclient.KeyMismatchError
	var execKey *identity.KeyMismatchError
	switch {
	case ctx.Err() != nil, errors.As(err, &refusal), errors.As(err, &relayKey), errors.As(err, &execKey),
		errors.Is(err, ErrPinMismatch), errors.Is(err, ErrNotPinned), errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return false
	}
	return true
}

// handshake runs Noise as initiator: IK with a pinned key, XX (trust on
// first use) otherwise. A pinned key that the executor no longer has is
// refused with both fingerprints. onPin, if not nil, learns of a key
// pinned by XX. payload (early data) goes in IK message 1; XX sends none.
func handshake(ctx context.Context, raw net.Conn, key identity.Key, u transport.URL, pinned *identity.PublicKey, known *identity.KnownExecutors, noTOFU bool, onPin func(string, identity.PublicKey, string), payload []byte) (*transport.NoiseConn, error) {
	addr := u.Base()
	cfg := transport.NoiseConfig{Static: key.Keypair(), Purpose: transport.PurposeExec}
	fromFile := false
	if pinned == nil && known != nil {
		if k, ok := known.Lookup(addr); ok {
			pinned, fromFile = &k, true
		}
	}
	if pinned != nil {
		cfg.PeerStatic = pinned[:]
		cfg.Payload = payload
		nc, err := transport.NoiseInitiator(ctx, raw, cfg)
		if err == nil {
			return nc, nil
		}
		if !errors.Is(err, transport.ErrHandshakeRefused) {
			return nil, err
		}
		// Refused: a changed executor key, or our key is not authorised.
		// Learn which with an XX probe that stops before revealing us.
		presented, perr := probeExecutorKey(ctx, u, key)
		if perr == nil && presented != *pinned {
			if fromFile {
				return nil, &identity.KeyMismatchError{Addr: addr, Pinned: *pinned, Presented: presented, File: known.Path()}
			}
			return nil, fmt.Errorf("%w: executor %s: pinned %s (by the URL's #fingerprint or Config.Pin), presented %s", ErrPinMismatch, addr, pinned.Fingerprint(), presented.Fingerprint())
		}
		return nil, fmt.Errorf("executor %s refused this client (key %s is not authorised there): %w", addr, key.PublicKey().Fingerprint(), err)
	}
	if noTOFU {
		return nil, fmt.Errorf("executor %s: %w", addr, ErrNotPinned)
	}
	var newPin *identity.PublicKey
	cfg.VerifyPeer = func(peer []byte) error {
		var k identity.PublicKey
		copy(k[:], peer)
		if err := known.Pin(addr, k); err != nil {
			return err
		}
		newPin = &k
		return nil
	}
	nc, err := transport.NoiseInitiator(ctx, raw, cfg)
	// Reported once the handshake is over (not from inside it, where a
	// slow callback would stall it), and even if it then failed: the pin
	// is written either way.
	if newPin != nil && onPin != nil {
		onPin(addr, *newPin, known.Path())
	}
	return nc, err
}

var errProbeDone = errors.New("probe done")

// ErrPinMismatch: the executor presents another key than the one pinned by
// the URL or Config.Pin (a pin from the KnownExecutors file reports an
// *identity.KeyMismatchError instead, naming the file).
var ErrPinMismatch = errors.New("the executor's key differs from the pin")

// ErrNotPinned: the executor's key is pinned nowhere (the URL, Config.Pin,
// the KnownExecutors file) and Config.NoTOFU forbids pinning it now.
var ErrNotPinned = errors.New("no pinned key for this executor, and trust on first use is off: pin it with the URL's #fingerprint or a line in the known executors file")

// probeExecutorKey learns the key an executor presents, without revealing
// ours (the XX handshake is abandoned before message 3).
func probeExecutorKey(ctx context.Context, u transport.URL, key identity.Key) (identity.PublicKey, error) {
	raw, err := u.Dial(ctx)
	if err != nil {
		return identity.PublicKey{}, err
	}
	defer raw.Close()
	var presented identity.PublicKey
	_, err = transport.NoiseInitiator(ctx, raw, transport.NoiseConfig{Static: key.Keypair(), Purpose: transport.PurposeExec, VerifyPeer: func(peer []byte) error {
		copy(presented[:], peer)
		return errProbeDone
	}})
	if errors.Is(err, errProbeDone) {
		return presented, nil
	}
	return identity.PublicKey{}, err
}

// muxConn runs mux over an established channel: a control stream for
// RPC, and an accept loop for the executor's per-process event streams.
func muxConn(nc net.Conn, cfg transport.MuxConfig, route func(string, transport.Params, bool)) (*conn, error) {
	sess, err := transport.MuxClient(nc, cfg)
	if err != nil {
		nc.Close()
		return nil, err
	}
	ctl, err := sess.OpenStream()
	if err != nil {
		sess.Close()
		return nil, fmt.Errorf("opening the control stream: %w", err)
	}
	// The control stream's notifications are codex's (codex/notification),
	// delivered in order on its reader: a consumer that blocks holds up
	// this connection's replies, which is its own backpressure.
	rpc := NewRPC(transport.NewMsgpackConn(ctl, 0), func(m string, p transport.Params) { route(m, p, true) })
	go acceptEventStreams(sess, route)
	go func() {
		<-rpc.Done()
		sess.Close()
	}()
	go func() {
		<-sess.CloseChan()
		rpc.Close()
	}()
	return &conn{rpc: rpc, close: func() error { rpc.Close(); return sess.Close() }}, nil
}

// acceptEventStreams reads each process's event stream on a goroutine of
// its own, so a consumer that stops reading one process's events holds up
// only that stream.
func acceptEventStreams(sess *transport.MuxSession, route func(string, transport.Params, bool)) {
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		go func() {
			defer st.Close()
			mc := transport.NewMsgpackConn(st, 0)
			hdr, err := mc.ReadMessage(context.Background())
			if err != nil || hdr.Kind != transport.KindNotification || hdr.Method != protocol.MethodProcessEvents {
				return
			}
			for {
				m, err := mc.ReadMessage(context.Background())
				if err != nil {
					return
				}
				if m.Kind == transport.KindNotification {
					route(m.Method, m.Params, true)
				}
			}
		}()
	}
}

// stdioDialer spawns an executor speaking JSON-RPC lite on its stdin and
// stdout. Closing ends the child's process group: TERM, then KILL after
// 2 s (child_*.go: what "group" and "TERM" are on each OS).
func stdioDialer(path string) dialFunc {
	return func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		cmd := exec.Command(path, "executor", "serve", "--listen", "stdio", "--log-level", "error")
		cmd.SysProcAttr = stdioChildAttr()
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return nil, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := cmd.Start(); err != nil {
			return nil, fmt.Errorf("spawning %s: %w", path, err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		rpc := NewRPC(transport.NewJSONConn(transport.NewLineFrames(stdout, stdin, stdin, 0)), func(m string, p transport.Params) { route(m, p, false) })
		stop := func() error {
			rpc.Close()
			stopChildGroup(cmd.Process, false)
			select {
			case <-exited:
			case <-time.After(2 * time.Second):
				stopChildGroup(cmd.Process, true)
				<-exited
			}
			return nil
		}
		return &conn{rpc: rpc, close: stop, shared: true, json: true}, nil
	}
}

var _ io.Closer = (*Remote)(nil)

// ListExecutors asks a relay for the executors cfg.Token may reach; cfg
// is validated, its zero fields filled from DefaultConfig.
func ListExecutors(ctx context.Context, url string, cfg Config) ([]protocol.RelayExecutor, error) {
	if _, err := transport.ParseURL(url, transport.SchemeRelay, transport.SchemeRelayWS); err != nil {
		return nil, err
	}
	cfg, err := cfg.ready()
	if err != nil {
		return nil, err
	}
	key, err := cfg.clientKey()
	if err != nil {
		return nil, err
	}
	rc, err := relayclient.Dial(ctx, url, key.Keypair(), relayclient.Options{Mux: cfg.Mux})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return rc.Executors(ctx, cfg.Token)
}
