package transport

import (
	"context"
	"fmt"
	"net"
	"strings"

	"github.com/coder/websocket"
)

// Relay URL schemes: outpost://HOST:PORT#<fingerprint> is raw TCP;
// outpost+ws://HOST:PORT#<fingerprint> carries the same bytes in binary
// WebSocket messages (path /relay), for networks that pass only HTTP.
const (
	RelayScheme   = "outpost://"
	RelayWSScheme = "outpost+ws://"
	// RelayWSPath is where a relay accepts WebSocket connections.
	RelayWSPath = "/relay"
)

// IsRelayURL reports whether s names a relay.
func IsRelayURL(s string) bool {
	return strings.HasPrefix(s, RelayScheme) || strings.HasPrefix(s, RelayWSScheme)
}

// ParseRelayURL splits a relay URL into its address and the relay key's
// fingerprint, which the URL must carry: the relay is always pinned.
func ParseRelayURL(s string) (addr, fingerprint string, err error) {
	rest, ok := strings.CutPrefix(s, RelayScheme)
	if !ok {
		if rest, ok = strings.CutPrefix(s, RelayWSScheme); !ok {
			return "", "", fmt.Errorf("invalid relay URL %q; expected outpost://HOST:PORT#<fingerprint> or outpost+ws://...", s)
		}
	}
	addr, fingerprint, _ = strings.Cut(rest, "#")
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return "", "", fmt.Errorf("invalid relay URL %q: %v", s, err)
	}
	if fingerprint == "" {
		return "", "", fmt.Errorf("relay URL %q lacks the relay's key fingerprint (#...)", s)
	}
	return addr, fingerprint, nil
}

// DialRelay opens the byte pipe to a relay named by url.
func DialRelay(ctx context.Context, url string) (net.Conn, error) {
	addr, _, err := ParseRelayURL(url)
	if err != nil {
		return nil, err
	}
	if strings.HasPrefix(url, RelayWSScheme) {
		c, _, err := websocket.Dial(ctx, "ws://"+addr+RelayWSPath, &websocket.DialOptions{CompressionMode: websocket.CompressionDisabled})
		if err != nil {
			return nil, fmt.Errorf("dial relay %s over WebSocket: %w", addr, err)
		}
		c.SetReadLimit(-1)
		// The pipe outlives the dial's context.
		return websocket.NetConn(context.Background(), c, websocket.MessageBinary), nil
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("dial relay %s: %w", addr, err)
	}
	return c, nil
}
