package transport

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/identity"
)

// Connection URLs. Every URL outpost dials, and every --listen URL, is
// parsed by ParseURL:
//
//	tcp://HOST:PORT[#fingerprint]        executor, native stack (Noise, the multiplexer, msgpack) over TCP
//	unix:///path[#fingerprint]           the same over a Unix socket
//	ws://HOST:PORT[/path]                executor, codex's JSON-RPC lite (no key: plaintext)
//	stdio://PROGRAM                      an executor spawned on stdin and stdout
//	outpost://HOST:PORT#fingerprint      a relay over TCP; the fingerprint is mandatory
//	outpost+ws://HOST:PORT#fingerprint   a relay over WebSocket (binary messages at RelayWSPath)
//
// The fragment is the peer's key fingerprint (identity.ParsePublicKey).
// HOST may be a name or an IP literal ([::1] for IPv6); PORT is decimal.
//
// A relay URL may list several relays of one cluster, which all hold the
// cluster's key and so share the fingerprint:
// outpost://HOST1:PORT,HOST2:PORT#fingerprint (at most MaxRelayAddrs, each
// once). Addr is then the first; Addrs lists them all in the order
// written, Dial tries them in that order, and WithAddr names one. Other
// schemes name one peer.
const (
	SchemeTCP     = "tcp"
	SchemeUnix    = "unix"
	SchemeWS      = "ws"
	SchemeStdio   = "stdio"
	SchemeRelay   = "outpost"
	SchemeRelayWS = "outpost+ws"
)

// Relay URL prefixes: outpost://HOST:PORT#<fingerprint> is raw TCP;
// outpost+ws://HOST:PORT#<fingerprint> carries the same bytes in binary
// WebSocket messages (path /relay), for networks that pass only HTTP.
const (
	RelayScheme   = SchemeRelay + "://"
	RelayWSScheme = SchemeRelayWS + "://"
	// RelayWSPath is where a relay accepts WebSocket connections.
	RelayWSPath = "/relay"
)

// urlForms are the schemes' shapes, for error messages, in the order
// messages list them.
var urlForms = []struct{ scheme, form, name string }{
	{SchemeTCP, "tcp://HOST:PORT", "tcp"},
	{SchemeUnix, "unix:///path", "unix"},
	{SchemeWS, "ws://HOST:PORT", "websocket"},
	{SchemeStdio, "stdio:///path/to/outpost", "stdio"},
	{SchemeRelay, "outpost://HOST:PORT#<fingerprint>", "relay"},
	{SchemeRelayWS, "outpost+ws://HOST:PORT#<fingerprint>", "relay"},
}

// MaxRelayAddrs bounds the addresses one relay URL lists: a handful of a
// cluster's relays to start from (the client learns the others from the
// relays' answers), not an inventory.
const MaxRelayAddrs = 16

// AddrDialTimeout bounds the dial of one address of a relay URL that
// lists several, when another is left to try: a host that is down and
// drops packets (no refusal) would otherwise hold the dial for the
// operating system's SYN retries, about two minutes. 5 s lets a lost SYN
// be sent again twice (at 1 s and 3 s). The last address has the
// caller's context alone.
const AddrDialTimeout = 5 * time.Second

// URL is a parsed connection URL.
type URL struct {
	// Scheme is one of the Scheme constants.
	Scheme string
	// Addr is HOST:PORT for tcp, ws, outpost and outpost+ws; the socket's
	// absolute path for unix; the program for stdio. A relay URL that
	// lists several addresses has the first here (Addrs has them all).
	Addr string
	// more are a relay URL's addresses after Addr, comma-separated ("":
	// none). A string, not a slice, so that URLs compare with ==.
	more string
	// Path is a ws:// URL's request path ("" or starting with "/").
	Path string
	// Fingerprint is the #fragment as written ("" when there is none),
	// and Key the public key it names.
	Fingerprint string
	Key         identity.PublicKey

	raw string
}

// URLError is ParseURL's error. Its message names the forms expected.
type URLError struct {
	URL string
	// Scheme is the URL's scheme when it is one of the accepted ones and
	// the rest is malformed; "" when the scheme is not accepted.
	Scheme string
	// Want are the accepted schemes.
	Want []string
	// Detail, when set, says what is wrong instead of the expected form.
	Detail string
	Err    error
}

func (e *URLError) Error() string {
	if e.Scheme == "" {
		return fmt.Sprintf("unsupported URL `%s`; expected %s", e.URL, formList(e.Want))
	}
	name, form := e.Scheme, e.Scheme+"://..."
	for _, f := range urlForms {
		if f.scheme == e.Scheme {
			name, form = f.name, f.form
		}
	}
	switch {
	case e.Detail != "" && e.Err != nil:
		return fmt.Sprintf("%s URL `%s`: %s: %v", name, e.URL, e.Detail, e.Err)
	case e.Detail != "":
		return fmt.Sprintf("%s URL `%s` %s", name, e.URL, e.Detail)
	}
	if e.Scheme == SchemeRelay || e.Scheme == SchemeRelayWS {
		return fmt.Sprintf("invalid relay URL `%s`; expected `%s` or `%s`", e.URL, "outpost://HOST:PORT#<fingerprint>", "outpost+ws://HOST:PORT#<fingerprint>")
	}
	return fmt.Sprintf("invalid %s URL `%s`; expected `%s`", name, e.URL, form)
}

func (e *URLError) Unwrap() error { return e.Err }

// URLErrorScheme is the scheme of a URL that ParseURL refused as
// malformed: "" when err is not a *URLError, or when the URL's scheme is
// not one of those accepted.
func URLErrorScheme(err error) string {
	var ue *URLError
	if errors.As(err, &ue) {
		return ue.Scheme
	}
	return ""
}

// formList is "`a`, `b` or `c`".
func formList(schemes []string) string {
	var forms []string
	for _, f := range urlForms {
		for _, s := range schemes {
			if s == f.scheme {
				forms = append(forms, "`"+f.form+"`")
			}
		}
	}
	switch len(forms) {
	case 0:
		return "nothing"
	case 1:
		return forms[0]
	}
	return strings.Join(forms[:len(forms)-1], ", ") + " or " + forms[len(forms)-1]
}

// AllSchemes are every scheme ParseURL knows.
var AllSchemes = []string{SchemeTCP, SchemeUnix, SchemeWS, SchemeStdio, SchemeRelay, SchemeRelayWS}

// ParseURL parses a connection URL of one of schemes (every scheme when
// none is given). Schemes are lower case; a relay URL must carry the
// relay's fingerprint, tcp:// and unix:// may, and the others may not.
// A malformed URL's *URLError names the form expected.
func ParseURL(s string, schemes ...string) (URL, error) {
	if len(schemes) == 0 {
		schemes = AllSchemes
	}
	scheme, rest, ok := strings.Cut(s, "://")
	accepted := false
	for _, sc := range schemes {
		accepted = accepted || sc == scheme
	}
	if !ok || !accepted {
		return URL{}, &URLError{URL: s, Want: schemes}
	}
	bad := func(detail string, err error) (URL, error) {
		return URL{}, &URLError{URL: s, Scheme: scheme, Want: schemes, Detail: detail, Err: err}
	}
	u := URL{Scheme: scheme, raw: s}
	rest, u.Fingerprint, _ = strings.Cut(rest, "#")
	if u.Fingerprint != "" {
		if scheme != SchemeTCP && scheme != SchemeUnix && scheme != SchemeRelay && scheme != SchemeRelayWS {
			return bad("carries no key; drop its #fragment", nil)
		}
		k, err := identity.ParsePublicKey(u.Fingerprint)
		if err != nil {
			return bad("invalid key fingerprint", err)
		}
		u.Key = k
	}
	switch scheme {
	case SchemeTCP:
		if !validHostPort(rest) {
			return bad("", nil)
		}
		u.Addr = rest
	case SchemeRelay, SchemeRelayWS:
		addrs := strings.Split(rest, ",")
		if len(addrs) > MaxRelayAddrs {
			return bad(fmt.Sprintf("lists %d relays; at most %d", len(addrs), MaxRelayAddrs), nil)
		}
		for i, a := range addrs {
			if !validHostPort(a) {
				if len(addrs) > 1 {
					return bad(fmt.Sprintf("has an invalid address %q (want HOST:PORT[,HOST:PORT...])", a), nil)
				}
				return bad("", nil)
			}
			if slices.Contains(addrs[:i], a) {
				return bad(fmt.Sprintf("lists %s twice", a), nil)
			}
		}
		u.Addr, u.more = addrs[0], strings.Join(addrs[1:], ",")
		if u.Fingerprint == "" {
			return bad("lacks the relay's key fingerprint (#...)", nil)
		}
	case SchemeWS:
		hostPort, path := rest, ""
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			hostPort, path = rest[:i], rest[i:]
		}
		if !validHostPort(hostPort) || strings.ContainsFunc(path, isSpaceOrControl) {
			return bad("", nil)
		}
		u.Addr, u.Path = hostPort, path
	case SchemeUnix:
		if !strings.HasPrefix(rest, "/") || strings.ContainsRune(rest, 0) {
			return bad("", nil)
		}
		u.Addr = rest
	case SchemeStdio:
		if rest == "" {
			return bad("", nil)
		}
		u.Addr = rest
	}
	return u, nil
}

// validHostPort: HOST:PORT with a decimal port (0-65535) and a host
// without characters that belong elsewhere in a URL (an empty host is the
// local one).
func validHostPort(s string) bool {
	host, port, err := net.SplitHostPort(s)
	if err != nil || port == "" || strings.ContainsAny(host, "/?@#") || strings.ContainsFunc(host, isSpaceOrControl) {
		return false
	}
	for _, c := range port {
		if c < '0' || c > '9' {
			return false
		}
	}
	n, err := strconv.ParseUint(port, 10, 16)
	return err == nil && n <= 65535
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// String is the URL as written.
func (u URL) String() string { return u.raw }

// Addrs are the addresses the URL names, in the order written: Addr alone
// but for a relay URL that lists several.
func (u URL) Addrs() []string {
	if u.more == "" {
		return []string{u.Addr}
	}
	return append([]string{u.Addr}, strings.Split(u.more, ",")...)
}

// WithAddr is u naming addr (HOST:PORT) alone: the same scheme and
// fingerprint, written scheme://addr#fingerprint. For one relay of a
// cluster, whose URL lists several or whose members are learnt.
func (u URL) WithAddr(addr string) URL {
	v := URL{Scheme: u.Scheme, Addr: addr, Path: u.Path, Fingerprint: u.Fingerprint, Key: u.Key}
	v.raw = u.Scheme + "://" + addr + u.Path
	if u.Fingerprint != "" {
		v.raw += "#" + u.Fingerprint
	}
	return v
}

// Base is the URL without its fragment: the key of a pin in the
// known_executors file.
func (u URL) Base() string {
	base, _, _ := strings.Cut(u.raw, "#")
	return base
}

// HasKey reports whether the URL names its peer's key.
func (u URL) HasKey() bool { return u.Fingerprint != "" }

// IsRelay reports whether the URL names a relay.
func (u URL) IsRelay() bool { return u.Scheme == SchemeRelay || u.Scheme == SchemeRelayWS }

// Network is the net.Dial network of the URL's address: "unix" for
// unix://, "tcp" for the others but stdio ("").
func (u URL) Network() string {
	switch u.Scheme {
	case SchemeUnix:
		return "unix"
	case SchemeStdio:
		return ""
	}
	return "tcp"
}

// Dial opens the byte stream to u: a TCP or Unix connection, or for
// outpost+ws:// a WebSocket carrying the bytes in binary messages at
// RelayWSPath. ws:// and stdio:// carry messages, not a byte stream, and
// are refused. A relay URL that lists several addresses is dialled as
// DialAny does.
func (u URL) Dial(ctx context.Context) (net.Conn, error) {
	c, _, err := u.DialAny(ctx)
	return c, err
}

// DialAny dials u's addresses in the order written until one connects,
// and returns the connection and u naming the address it reached
// (WithAddr; u itself when it names one). Each address but the last is
// given at most AddrDialTimeout of ctx. Only the connection is tried
// here: what the peer then answers is the caller's to judge. When every
// address fails, the error joins theirs.
func (u URL) DialAny(ctx context.Context) (net.Conn, URL, error) {
	if u.more == "" {
		c, err := u.dialOne(ctx)
		return c, u, err
	}
	addrs := u.Addrs()
	var errs []error
	for i, a := range addrs {
		one := u.WithAddr(a)
		actx, cancel := ctx, context.CancelFunc(func() {})
		if i < len(addrs)-1 {
			actx, cancel = context.WithTimeout(ctx, AddrDialTimeout)
		}
		c, err := one.dialOne(actx)
		cancel()
		if err == nil {
			return c, one, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, u, errors.Join(errs...)
}

// dialOne dials u's first address.
func (u URL) dialOne(ctx context.Context) (net.Conn, error) {
	switch u.Scheme {
	case SchemeRelayWS:
		c, _, err := websocket.Dial(ctx, "ws://"+u.Addr+RelayWSPath, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return nil, fmt.Errorf("dial relay %s over WebSocket: %w", u.Addr, err)
		}
		c.SetReadLimit(-1)
		// The pipe outlives the dial's context.
		return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
	case SchemeRelay, SchemeTCP, SchemeUnix:
		var d net.Dialer
		c, err := d.DialContext(ctx, u.Network(), u.Addr)
		if err != nil {
			if u.IsRelay() {
				return nil, fmt.Errorf("dial relay %s: %w", u.Addr, err)
			}
			return nil, fmt.Errorf("dial %s: %w", u.Base(), err)
		}
		return c, nil
	}
	return nil, fmt.Errorf("%s:// is not a byte stream to dial", u.Scheme)
}
