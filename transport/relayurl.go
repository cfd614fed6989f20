package transport

import (
	"fmt"
	"net"
	"strings"
)

// RelayScheme is the URL scheme of a relay: outpost://HOST:PORT#<fingerprint>.
const RelayScheme = "outpost://"

// ParseRelayURL splits a relay URL into its TCP address and the relay
// key's fingerprint, which the URL must carry: the relay is always pinned.
func ParseRelayURL(s string) (addr, fingerprint string, err error) {
	rest, ok := strings.CutPrefix(s, RelayScheme)
	if !ok {
		return "", "", fmt.Errorf("invalid relay URL %q; expected outpost://HOST:PORT#<fingerprint>", s)
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
