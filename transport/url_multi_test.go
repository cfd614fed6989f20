package transport

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/identity"
)

func testFingerprint(t *testing.T) (string, identity.PublicKey) {
	t.Helper()
	k, err := NoiseSuite.GenerateKeypair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	var key identity.PublicKey
	copy(key[:], k.Public)
	return key.Fingerprint(), key
}

// A relay URL may list several relays of one cluster: Addr is the first,
// Addrs all in the order written, and WithAddr names one of them with the
// same scheme and fingerprint.
func TestRelayURLListsSeveralRelays(t *testing.T) {
	fp, key := testFingerprint(t)
	for _, scheme := range []string{SchemeRelay, SchemeRelayWS} {
		in := scheme + "://r1.example.net:7443,10.0.0.2:7443,[::1]:7444#" + fp
		u, err := ParseURL(in)
		if err != nil {
			t.Fatalf("ParseURL(%q): %v", in, err)
		}
		want := []string{"r1.example.net:7443", "10.0.0.2:7443", "[::1]:7444"}
		if u.Scheme != scheme || u.Addr != want[0] || !slices.Equal(u.Addrs(), want) || u.Key != key || u.String() != in || u.Base() != strings.TrimSuffix(in, "#"+fp) {
			t.Fatalf("ParseURL(%q) = %+v, Addrs %v", in, u, u.Addrs())
		}
		one := u.WithAddr("10.0.0.2:7443")
		if one.String() != scheme+"://10.0.0.2:7443#"+fp || one.Addr != "10.0.0.2:7443" || !slices.Equal(one.Addrs(), []string{"10.0.0.2:7443"}) || one.Key != key {
			t.Fatalf("WithAddr: %+v", one)
		}
		// WithAddr's URL is what ParseURL makes of its text.
		if back, err := ParseURL(one.String()); err != nil || back != one {
			t.Fatalf("WithAddr's URL parses to %+v (%v), want %+v", back, err, one)
		}
	}
	// One address: Addrs is Addr alone.
	u, err := ParseURL("outpost://h:1#" + fp)
	if err != nil || !slices.Equal(u.Addrs(), []string{"h:1"}) {
		t.Fatalf("%+v %v", u.Addrs(), err)
	}
}

func TestRelayURLWithSeveralRelaysRefusesWhatIsNotAList(t *testing.T) {
	fp, _ := testFingerprint(t)
	many := make([]string, MaxRelayAddrs+1)
	for i := range many {
		many[i] = fmt.Sprintf("h:%d", i+1)
	}
	cases := []struct{ in, want string }{
		{"outpost://a:1,,b:2#" + fp, `invalid address ""`},
		{"outpost://a:1,b:2,#" + fp, `invalid address ""`},
		{"outpost://a:1,b#" + fp, `invalid address "b"`},
		{"outpost://a:1,b:99999#" + fp, `invalid address "b:99999"`},
		{"outpost://a:1,b:2,a:1#" + fp, "lists a:1 twice"},
		{"outpost://a:1,b:2", "lacks the relay's key fingerprint"},
		{"outpost://" + strings.Join(many, ",") + "#" + fp, "at most 16"},
		{"tcp://a:1,b:2#" + fp, "invalid tcp URL"}, // an executor is one
	}
	for _, c := range cases {
		_, err := ParseURL(c.in)
		var ue *URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseURL(%q) = %v, want a *URLError with %q", c.in, err, c.want)
		}
	}
	// Exactly MaxRelayAddrs is fine.
	if _, err := ParseURL("outpost://" + strings.Join(many[:MaxRelayAddrs], ",") + "#" + fp); err != nil {
		t.Fatalf("%d relays: %v", MaxRelayAddrs, err)
	}
}

// Dial tries a URL's relays in order: one that refuses the connection
// costs nothing but the refusal, and the connection returned is the
// first that answers, named by DialAny.
func TestDialTriesEachRelayInOrder(t *testing.T) {
	fp, _ := testFingerprint(t)
	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	dead.Close() // nothing listens there: the connection is refused
	live, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() {
		for {
			c, err := live.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("x"))
			c.Close()
		}
	}()
	u, err := ParseURL("outpost://" + deadAddr + "," + live.Addr().String() + "#" + fp)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, reached, err := u.DialAny(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := c.Read(b); err != nil || b[0] != 'x' {
		t.Fatalf("read %q %v", b, err)
	}
	c.Close()
	if reached != u.WithAddr(live.Addr().String()) {
		t.Fatalf("reached %+v, want the second relay", reached)
	}
	// Every relay refusing: the error names each.
	u, _ = ParseURL("outpost://" + deadAddr + "," + deadAddr[:strings.LastIndexByte(deadAddr, ':')] + ":1#" + fp)
	if _, err := u.Dial(ctx); err == nil || !strings.Contains(err.Error(), deadAddr) || !strings.Contains(err.Error(), "127.0.0.1:1") {
		t.Fatalf("dial of two dead relays: %v", err)
	}
}
