package transport

import (
	"bytes"
	"context"
	"net"
	"testing"
	"time"
)

// FuzzNoiseResponderHandshake: whatever an initiator sends, the responder
// fails cleanly (no panic, no hang past its timeout) unless it is a real
// handshake.
func FuzzNoiseResponderHandshake(f *testing.F) {
	f.Add([]byte("OP\x01\x01\x00\x05hello"))
	f.Add([]byte("OP\x01\x02\x00\x20" + string(make([]byte, 32))))
	f.Add([]byte("GET / HTTP/1.1\r\n\r\n"))
	server := testKey(f, "fuzz-responder")
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		defer a.Close()
		go func() {
			a.Write(data)
			a.Close()
		}()
		nc, err := NoiseResponder(context.Background(), b, NoiseConfig{Static: server, Purpose: "exec", AllowXX: true, HandshakeTimeout: time.Second})
		if err == nil {
			t.Fatalf("random bytes completed a handshake: %x", data)
		}
		if nc != nil {
			t.Fatal("a conn returned with an error")
		}
		b.Close()
	})
}

// FuzzNoiseRecords: after a real handshake, arbitrary bytes in place of
// the initiator's records never decrypt into data and never panic.
func FuzzNoiseRecords(f *testing.F) {
	f.Add([]byte{0x00, 0x10})
	f.Add(append([]byte{0x00, 0x20}, make([]byte, 32)...))
	f.Add([]byte{0xff, 0xff, 0x01})
	server, client := testKey(f, "fuzz-s"), testKey(f, "fuzz-c")
	f.Fuzz(func(t *testing.T, data []byte) {
		a, b := net.Pipe()
		rc := make(chan *NoiseConn, 1)
		go func() {
			nc, _ := NoiseResponder(context.Background(), b, NoiseConfig{Static: server, Purpose: "exec"})
			rc <- nc
		}()
		raw := &recorder{Conn: a}
		if _, err := NoiseInitiator(context.Background(), raw, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public}); err != nil {
			t.Fatal(err)
		}
		resp := <-rc
		if resp == nil {
			t.Fatal("handshake failed")
		}
		go func() {
			a.Write(data)
			a.Close()
		}()
		buf := make([]byte, 70000)
		n, err := resp.Read(buf)
		if err == nil && n > 0 && !bytes.Equal(buf[:n], nil) {
			t.Fatalf("forged bytes decrypted into %d bytes of data", n)
		}
		resp.Close()
	})
}
