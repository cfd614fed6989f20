package transport

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/flynn/noise"
)

// detRand is a deterministic byte stream for golden vectors.
type detRand struct {
	seed string
	n    uint64
	buf  []byte
}

func (r *detRand) Read(p []byte) (int, error) {
	for len(r.buf) < len(p) {
		var ctr [8]byte
		binary.BigEndian.PutUint64(ctr[:], r.n)
		r.n++
		sum := sha256.Sum256(append([]byte(r.seed), ctr[:]...))
		r.buf = append(r.buf, sum[:]...)
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

func testKey(t testing.TB, seed string) noise.DHKey {
	t.Helper()
	k, err := noise.DH25519.GenerateKeypair(&detRand{seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// recorder keeps a copy of everything written through a conn.
type recorder struct {
	net.Conn
	mu  sync.Mutex
	out bytes.Buffer
}

func (r *recorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	r.out.Write(p)
	r.mu.Unlock()
	return r.Conn.Write(p)
}

func (r *recorder) bytes() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.out.Bytes()...)
}

type handshakeResult struct {
	conn *NoiseConn
	err  error
}

// pair runs a handshake over a real TCP loopback connection.
func pair(t *testing.T, ini, resp NoiseConfig) (*NoiseConn, *NoiseConn, error, error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	rc := make(chan handshakeResult, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			rc <- handshakeResult{nil, err}
			return
		}
		nc, err := NoiseResponder(context.Background(), c, resp)
		if err != nil {
			c.Close()
		}
		rc <- handshakeResult{nc, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	ic, ierr := NoiseInitiator(context.Background(), c, ini)
	if ierr != nil {
		c.Close()
	}
	r := <-rc
	if ic != nil {
		t.Cleanup(func() { ic.Close() })
	}
	if r.conn != nil {
		t.Cleanup(func() { r.conn.Close() })
	}
	return ic, r.conn, ierr, r.err
}

func TestNoisePrologueIsFrozen(t *testing.T) {
	// "outpost-noise/1", "exec", "IK", each uint16-length-prefixed.
	const want = "000f6f7574706f73742d6e6f6973652f310004657865630002494b"
	if got := hex.EncodeToString(NoisePrologue("exec", patternIK)); got != want {
		t.Fatalf("prologue drifted:\n got %s\nwant %s", got, want)
	}
}

// The golden transcript freezes the handshake's wire format: preamble,
// record framing, prologue, suite and pattern. Regenerate deliberately
// with OUTPOST_UPDATE_GOLDEN=1 only when the wire format is meant to change.
func TestNoiseGoldenHandshakeTranscript(t *testing.T) {
	cA, cB := net.Pipe()
	ra, rb := &recorder{Conn: cA}, &recorder{Conn: cB}
	server := testKey(t, "golden-responder")
	client := testKey(t, "golden-initiator")
	done := make(chan error, 1)
	var respConn *NoiseConn
	go func() {
		var err error
		respConn, err = NoiseResponder(context.Background(), rb, NoiseConfig{Static: server, Purpose: "exec", random: &detRand{seed: "golden-responder-ephemeral"}})
		done <- err
	}()
	ini, err := NoiseInitiator(context.Background(), ra, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public, Payload: []byte("token:golden"), random: &detRand{seed: "golden-initiator-ephemeral"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// One transport record each way belongs to the transcript too.
	go ini.Write([]byte("ping"))
	buf := make([]byte, 4)
	io.ReadFull(respConn, buf)
	go respConn.Write([]byte("pong"))
	io.ReadFull(ini, buf)
	transcript := "initiator " + hex.EncodeToString(ra.bytes()) + "\nresponder " + hex.EncodeToString(rb.bytes()) + "\n"
	path := filepath.Join("testdata", "noise", "golden_ik.txt")
	if os.Getenv("OUTPOST_UPDATE_GOLDEN") == "1" {
		os.MkdirAll(filepath.Dir(path), 0o755)
		if err := os.WriteFile(path, []byte(transcript), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (generate with OUTPOST_UPDATE_GOLDEN=1)", err)
	}
	if string(want) != transcript {
		t.Fatalf("the Noise wire format drifted from %s:\n got %s\nwant %s", path, transcript, want)
	}
}

func TestNoiseIKCarriesDataAndPayloadBothWays(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	var gotPeer, gotPayload []byte
	ic, rc, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public, Payload: []byte("hello-token")},
		NoiseConfig{Static: server, Purpose: "exec", Authorize: func(peer, payload []byte) error {
			gotPeer, gotPayload = peer, payload
			return nil
		}})
	if ierr != nil || rerr != nil {
		t.Fatalf("handshake: %v / %v", ierr, rerr)
	}
	if !bytes.Equal(gotPeer, client.Public) || string(gotPayload) != "hello-token" {
		t.Fatalf("authorize saw peer %x payload %q", gotPeer, gotPayload)
	}
	if !bytes.Equal(ic.PeerStatic(), server.Public) || !bytes.Equal(rc.PeerStatic(), client.Public) {
		t.Fatal("peer keys not reported")
	}
	// Sizes around the record boundary and far beyond it.
	for _, n := range []int{1, MaxRecordPlaintext - 1, MaxRecordPlaintext, MaxRecordPlaintext + 1, 5 << 20} {
		data := make([]byte, n)
		(&detRand{seed: "data"}).Read(data)
		go func() { ic.Write(data) }()
		got := make([]byte, n)
		if _, err := io.ReadFull(rc, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes corrupted", n)
		}
	}
	go rc.Write([]byte("reply"))
	got := make([]byte, 5)
	if _, err := io.ReadFull(ic, got); err != nil || string(got) != "reply" {
		t.Fatalf("%q %v", got, err)
	}
}

func TestNoiseIKWithWrongResponderKeyFails(t *testing.T) {
	server, client, other := testKey(t, "s"), testKey(t, "c"), testKey(t, "other")
	authorized := false
	_, _, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", PeerStatic: other.Public},
		NoiseConfig{Static: server, Purpose: "exec", Authorize: func(_, _ []byte) error { authorized = true; return nil }})
	if !errors.Is(ierr, ErrHandshakeRefused) || rerr == nil {
		t.Fatalf("initiator %v, responder %v", ierr, rerr)
	}
	if authorized {
		t.Fatal("responder authorised an initiator whose message it could not decrypt")
	}
}

func TestNoiseRefusedInitiatorLearnsNothing(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	refusal := errors.New("client key is not in the allow-list")
	ic, _, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public},
		NoiseConfig{Static: server, Purpose: "exec", Authorize: func(_, _ []byte) error { return refusal }})
	if !errors.Is(rerr, refusal) {
		t.Fatalf("responder: %v", rerr)
	}
	// The refused initiator sees the same thing as with a wrong key.
	if ic != nil || !errors.Is(ierr, ErrHandshakeRefused) {
		t.Fatalf("initiator: %v", ierr)
	}
}

func TestNoisePurposeMismatchFails(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	_, _, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public},
		NoiseConfig{Static: server, Purpose: "relay-join"})
	if ierr == nil || rerr == nil {
		t.Fatalf("a handshake for another purpose succeeded: %v / %v", ierr, rerr)
	}
}

func TestNoiseXXLetsInitiatorCheckResponderBeforeRevealingItself(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	var seen []byte
	ic, rc, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", Payload: []byte("p"), VerifyPeer: func(peer []byte) error { seen = peer; return nil }},
		NoiseConfig{Static: server, Purpose: "exec", AllowXX: true})
	if ierr != nil || rerr != nil {
		t.Fatalf("%v / %v", ierr, rerr)
	}
	if !bytes.Equal(seen, server.Public) || !bytes.Equal(rc.PeerStatic(), client.Public) || !bytes.Equal(ic.PeerStatic(), server.Public) {
		t.Fatal("keys not exchanged")
	}

	mismatch := errors.New("pinned key differs")
	authorized := false
	_, _, ierr, rerr = pair(t,
		NoiseConfig{Static: client, Purpose: "exec", VerifyPeer: func([]byte) error { return mismatch }},
		NoiseConfig{Static: server, Purpose: "exec", AllowXX: true, Authorize: func(_, _ []byte) error { authorized = true; return nil }})
	if !errors.Is(ierr, mismatch) || rerr == nil || authorized {
		t.Fatalf("initiator %v responder %v authorized %v", ierr, rerr, authorized)
	}
}

func TestNoiseXXRefusedWhenNotAllowed(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	_, _, _, rerr := pair(t, NoiseConfig{Static: client, Purpose: "exec"}, NoiseConfig{Static: server, Purpose: "exec"})
	if !errors.Is(rerr, ErrPatternNotAllowed) {
		t.Fatalf("responder: %v", rerr)
	}
}

func TestNoiseBadPreambleIsRefused(t *testing.T) {
	for _, garbage := range []string{"GET / HTTP/1.1\r\n\r\n", "OP\x02\x01", "OP\x01\x09", "\x00\x00\x00\x00"} {
		a, b := net.Pipe()
		go func() { a.Write([]byte(garbage)); a.Close() }()
		_, err := NoiseResponder(context.Background(), b, NoiseConfig{Static: testKey(t, "s"), Purpose: "exec", AllowXX: true})
		if err == nil {
			t.Fatalf("%q accepted", garbage)
		}
		b.Close()
	}
}

func TestNoiseSilentPeerTimesOut(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	start := time.Now()
	_, err := NoiseResponder(context.Background(), b, NoiseConfig{Static: testKey(t, "s"), Purpose: "exec", HandshakeTimeout: 50 * time.Millisecond})
	if err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("slow handshake: %v after %v", err, time.Since(start))
	}
}

// tamperConn flips a bit in, or replays, the first transport record the
// initiator sends after the handshake.
type tamperConn struct {
	net.Conn
	writes int
	mode   string
	last   []byte
}

func (c *tamperConn) Write(p []byte) (int, error) {
	c.writes++
	// Writes 1-2 are the preamble and message 1 (IK); 3 is data.
	if c.writes == 3 {
		switch c.mode {
		case "flip":
			q := append([]byte(nil), p...)
			q[len(q)-1] ^= 0x01
			return c.Conn.Write(q)
		case "replay":
			c.last = append([]byte(nil), p...)
			if _, err := c.Conn.Write(p); err != nil {
				return 0, err
			}
			_, err := c.Conn.Write(c.last)
			return len(p), err
		}
	}
	return c.Conn.Write(p)
}

func TestNoiseTamperedRecordFails(t *testing.T) {
	testNoiseCorruption(t, "flip", 0)
}

func TestNoiseReplayedRecordFails(t *testing.T) {
	testNoiseCorruption(t, "replay", 1)
}

func testNoiseCorruption(t *testing.T, mode string, goodReads int) {
	server, client := testKey(t, "s"), testKey(t, "c")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	rc := make(chan *NoiseConn, 1)
	go func() {
		c, _ := ln.Accept()
		nc, _ := NoiseResponder(context.Background(), c, NoiseConfig{Static: server, Purpose: "exec"})
		rc <- nc
	}()
	raw, _ := net.Dial("tcp", ln.Addr().String())
	ic, err := NoiseInitiator(context.Background(), &tamperConn{Conn: raw, mode: mode}, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public})
	if err != nil {
		t.Fatal(err)
	}
	defer ic.Close()
	resp := <-rc
	if resp == nil {
		t.Fatal("handshake failed")
	}
	defer resp.Close()
	ic.Write([]byte("secret"))
	buf := make([]byte, 6)
	for i := 0; i < goodReads; i++ {
		if _, err := io.ReadFull(resp, buf); err != nil || string(buf) != "secret" {
			t.Fatalf("genuine record: %q %v", buf, err)
		}
	}
	if _, err := io.ReadFull(resp, buf); !errors.Is(err, ErrRecordAuth) {
		t.Fatalf("%s record: err = %v, want ErrRecordAuth", mode, err)
	}
	if _, err := resp.Read(buf); !errors.Is(err, ErrRecordAuth) {
		t.Fatal("connection usable after an authentication failure")
	}
}

func TestNoiseRekeyKeepsBothSidesInStep(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	ic, rc, ierr, rerr := pair(t,
		NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public, RekeyInterval: 3},
		NoiseConfig{Static: server, Purpose: "exec", RekeyInterval: 3})
	if ierr != nil || rerr != nil {
		t.Fatal(ierr, rerr)
	}
	go func() {
		for i := 0; i < 20; i++ {
			ic.Write([]byte{byte(i)})
		}
	}()
	buf := make([]byte, 1)
	for i := 0; i < 20; i++ {
		if _, err := io.ReadFull(rc, buf); err != nil || buf[0] != byte(i) {
			t.Fatalf("record %d after rekeys: %v %v", i, buf, err)
		}
	}
}

func TestNoiseCiphertextNeverContainsPlaintext(t *testing.T) {
	server, client := testKey(t, "s"), testKey(t, "c")
	cA, cB := net.Pipe()
	ra := &recorder{Conn: cA}
	rc := make(chan *NoiseConn, 1)
	go func() {
		nc, _ := NoiseResponder(context.Background(), cB, NoiseConfig{Static: server, Purpose: "exec"})
		rc <- nc
	}()
	ic, err := NoiseInitiator(context.Background(), ra, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public})
	if err != nil {
		t.Fatal(err)
	}
	resp := <-rc
	marker := strings.Repeat("MARKER-7f3a-", 1000)
	go ic.Write([]byte(marker))
	io.ReadFull(resp, make([]byte, len(marker)))
	if bytes.Contains(ra.bytes(), []byte("MARKER-7f3a")) {
		t.Fatal("plaintext visible on the wire")
	}
}

func BenchmarkNoiseCipher(b *testing.B) {
	for _, suite := range []struct {
		name string
		cs   noise.CipherSuite
	}{
		{"AESGCM", noise.NewCipherSuite(noise.DH25519, noise.CipherAESGCM, noise.HashSHA256)},
		{"ChaChaPoly", noise.NewCipherSuite(noise.DH25519, noise.CipherChaChaPoly, noise.HashSHA256)},
	} {
		b.Run(suite.name, func(b *testing.B) {
			var k [32]byte
			c := suite.cs.Cipher(k)
			pt := make([]byte, MaxRecordPlaintext)
			out := make([]byte, 0, MaxRecordBytes)
			b.SetBytes(int64(len(pt)))
			for i := 0; i < b.N; i++ {
				ct := c.Encrypt(out[:0], uint64(i), nil, pt)
				if _, err := c.Decrypt(pt[:0], uint64(i), nil, ct); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

func BenchmarkNoiseConnThroughput(b *testing.B) {
	server, client := testKey(b, "s"), testKey(b, "c")
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	defer ln.Close()
	rc := make(chan *NoiseConn, 1)
	go func() {
		c, _ := ln.Accept()
		nc, _ := NoiseResponder(context.Background(), c, NoiseConfig{Static: server, Purpose: "exec"})
		rc <- nc
	}()
	raw, _ := net.Dial("tcp", ln.Addr().String())
	ic, err := NoiseInitiator(context.Background(), raw, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public})
	if err != nil {
		b.Fatal(err)
	}
	resp := <-rc
	const chunk = 256 << 10
	b.SetBytes(chunk)
	go func() {
		buf := make([]byte, chunk)
		for i := 0; i < b.N; i++ {
			ic.Write(buf)
		}
	}()
	buf := make([]byte, chunk)
	for i := 0; i < b.N; i++ {
		io.ReadFull(resp, buf)
	}
}

func BenchmarkNoiseHandshakeIK(b *testing.B) {
	server, client := testKey(b, "s"), testKey(b, "c")
	for i := 0; i < b.N; i++ {
		a, c := net.Pipe()
		go func() {
			NoiseResponder(context.Background(), c, NoiseConfig{Static: server, Purpose: "exec"})
		}()
		if _, err := NoiseInitiator(context.Background(), a, NoiseConfig{Static: client, Purpose: "exec", PeerStatic: server.Public}); err != nil {
			b.Fatal(err)
		}
		a.Close()
		c.Close()
	}
}
