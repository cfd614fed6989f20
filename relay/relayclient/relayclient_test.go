package relayclient

import (
	"context"
	"crypto/rand"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/flynn/noise"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

func newKey(t *testing.T) noise.DHKey {
	t.Helper()
	k, err := transport.NoiseSuite.GenerateKeypair(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// fakeRelay answers every control request with answer (nil: never).
func fakeRelay(t *testing.T, answer func(m *transport.Message, mc *transport.MsgpackConn)) string {
	t.Helper()
	key := newKey(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				nc, err := transport.NoiseResponder(context.Background(), c, transport.NoiseConfig{Static: key, Purpose: transport.PurposeRelay})
				if err != nil {
					return
				}
				sess, err := transport.MuxServer(nc, transport.DefaultMuxConfig())
				if err != nil {
					return
				}
				defer sess.Close()
				st, err := sess.AcceptStream()
				if err != nil {
					return
				}
				mc := transport.NewMsgpackConn(st, 0)
				m, err := mc.ReadMessage(context.Background())
				if err != nil {
					return
				}
				if answer != nil {
					answer(m, mc)
				}
				<-sess.CloseChan()
			}()
		}
	}()
	var pub identity.PublicKey
	copy(pub[:], key.Public)
	return transport.RelayScheme + ln.Addr().String() + "#" + pub.Fingerprint()
}

func TestARefusalIsTheRelaysErrorItself(t *testing.T) {
	url := fakeRelay(t, func(m *transport.Message, mc *transport.MsgpackConn) {
		mc.WriteError(context.Background(), m.ID, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor x is offline"))
	})
	c, err := Dial(context.Background(), url, newKey(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, _, err = c.Connect(context.Background(), "x", "tok")
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || protocol.KindOf(err) != protocol.KindUnavailable {
		t.Fatalf("%T %v, want the relay's *protocol.Error", err, err)
	}
}

func TestCallEndsWithItsContext(t *testing.T) {
	url := fakeRelay(t, nil) // reads the request, never answers
	c, err := Dial(context.Background(), url, newKey(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = c.Executors(ctx, "tok")
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), protocol.MethodRelayExecutors+": ") {
		t.Fatalf("%v, want relay/executors: context deadline exceeded", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("the call ended %v after its context", took)
	}
}

func TestDialPinsTheRelayAndRefusesOtherURLs(t *testing.T) {
	url := fakeRelay(t, nil)
	wrong := url[:strings.IndexByte(url, '#')+1] + func() string {
		var pub identity.PublicKey
		copy(pub[:], newKey(t).Public)
		return pub.Fingerprint()
	}()
	if c, err := Dial(context.Background(), wrong, newKey(t), Options{HandshakeTimeout: 2 * time.Second}); err == nil {
		c.Close()
		t.Fatal("a relay presenting another key was accepted")
	} else if !errors.Is(err, transport.ErrHandshakeRefused) {
		t.Fatalf("wrong relay key: %v, want ErrHandshakeRefused", err)
	}
	for _, u := range []string{"tcp://127.0.0.1:1", "outpost://127.0.0.1:1", "outpost://nohostport#x"} {
		var ue *transport.URLError
		if _, err := Dial(context.Background(), u, newKey(t), Options{}); !errors.As(err, &ue) {
			t.Errorf("%s: %v, want a URL error", u, err)
		}
	}
}
