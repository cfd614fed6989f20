package relay

// The raw path: requests in the handshake, data connections, splice(2).

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// joinVia starts an executor joined as id through relayURL (r itself, or
// a proxy in front of it) with dataConns data connections.
func joinVia(t *testing.T, relayURL, id, token string, k identity.Key, dataConns int) *testExecutor {
	t.Helper()
	e := startJoined(t, k, executor.JoinConfig{RelayURL: relayURL, ID: id, Token: token, DataConns: dataConns})
	e.waitJoined(t)
	return e
}

// pinned is a client config that knows the executor's key, so it takes
// the early path.
func pinned(e *testExecutor) client.Config {
	return client.Config{Pin: e.key.PublicKey().Fingerprint()}
}

func idleDataConns(r *testRelay, n int) func() bool {
	return func() bool { return r.srv.Stats().IdleDataConns >= n }
}

func TestRawPathMovesABigTransferByteForByte(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 2)
	waitFor(t, testTimeout, "two idle data connections", idleDataConns(r, 2))
	env, err := dialVia(t, r, "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), pinned(e))
	if err != nil {
		t.Fatal(err)
	}
	// 24 MiB of random bytes through cat and back: every byte crosses the
	// switch from Noise to raw on both sides, both ways.
	in := make([]byte, 24<<20)
	rng := rand.NewChaCha8([32]byte{7})
	rng.Read(in)
	cmd := client.Command(env, "/bin/cat")
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) || sha256.Sum256(out) != sha256.Sum256(in) {
		t.Fatalf("got %d bytes back (want %d), equal: %v", len(out), len(in), bytes.Equal(in, out))
	}
	if st := r.srv.Stats(); st.DataSplices < 1 {
		t.Fatalf("the client was not spliced to a data connection: %+v", st)
	}
	// The pool refills in the background.
	waitFor(t, testTimeout, "the pool refilled", idleDataConns(r, 2))
}

// recordingFront is a TCP proxy in front of addr recording both
// directions of every connection, each connection separately.
type recordingFront struct {
	ln    net.Listener
	mu    sync.Mutex
	conns [][]byte // per connection: everything, both ways
	first [][]byte // per connection: what the dialer sent first, up to 8 KiB
}

func startRecordingFront(t *testing.T, addr string) *recordingFront {
	f := &recordingFront{}
	f.ln = listenForwarding(t, addr, func(c, u net.Conn) {
		f.mu.Lock()
		i := len(f.conns)
		f.conns = append(f.conns, nil)
		f.first = append(f.first, nil)
		f.mu.Unlock()
		rec := func(up bool) io.Writer {
			return writerFunc(func(p []byte) {
				f.mu.Lock()
				f.conns[i] = append(f.conns[i], p...)
				if up && len(f.first[i]) < 8<<10 {
					f.first[i] = append(f.first[i], p...)
				}
				f.mu.Unlock()
			})
		}
		go func() { io.Copy(c, io.TeeReader(u, rec(false))); c.Close(); u.Close() }()
		go func() { io.Copy(u, io.TeeReader(c, rec(true))); u.Close(); c.Close() }()
	})
	return f
}

func (f *recordingFront) url(r *testRelay) string {
	return "outpost://" + f.ln.Addr().String() + "#" + r.key.PublicKey().Fingerprint()
}

func (f *recordingFront) all() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return bytes.Join(f.conns, nil)
}

func TestRawPathNeverShowsTheRelayPlaintext(t *testing.T) {
	r := newRelay(t)
	exFront := startRecordingFront(t, r.addr)
	e := joinVia(t, exFront.url(r), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 2)
	waitFor(t, testTimeout, "idle data connections", idleDataConns(r, 2))
	clFront := startRecordingFront(t, r.addr)
	opts := pinned(e)
	opts.Executor, opts.Token, opts.Key = "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), key(t)
	opts.KnownExecutors = filepath.Join(t.TempDir(), "known")
	env, err := client.Dial(ctxT(t), clFront.url(r), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	out, err := client.Command(env, "/bin/sh", "-c", "echo MARKER-9e1f-$((6*7))").Output()
	if err != nil || string(out) != "MARKER-9e1f-42\n" {
		t.Fatalf("%q %v", out, err)
	}
	if st := r.srv.Stats(); st.DataSplices != 1 {
		t.Fatalf("want the raw path: %+v", st)
	}
	for what, b := range map[string][]byte{"client's link": clFront.all(), "executor's links": exFront.all()} {
		if len(b) == 0 || bytes.Contains(b, []byte("MARKER-9e1f")) || bytes.Contains(b, []byte("/bin/sh")) {
			t.Fatalf("the %s to the relay (%d bytes) hold plaintext", what, len(b))
		}
	}
}

func TestDataConnectionNeedsTheKeyBoundToTheID(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), -1)
	ctx := ctxT(t)

	// Another key offering a data connection for x is refused.
	_, err := relayclient.DialData(ctx, r.url(), key(t).Keypair(), relayclient.Options{}, "x")
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("another key's data connection: %v (kind %q), want refused", err, protocol.KindOf(err))
	}
	// So is one for an id not joined.
	if _, err = relayclient.DialData(ctx, r.url(), e.key.Keypair(), relayclient.Options{}, "y"); protocol.KindOf(err) != protocol.KindUnavailable {
		t.Fatalf("data connection for an id not joined: %v, want unavailable", err)
	}

	// A replay of the executor's message 1 (here: a genuine one whose
	// sender then cannot go on) gets the relay's answer but is never
	// registered: it cannot confirm.
	payload, err := transport.PayloadRequest(transport.IntID(1), protocol.MethodRelayData, protocol.RelayDataParams{ExecutorID: "x"})
	if err != nil {
		t.Fatal(err)
	}
	offer, err := transport.NewNoiseIKOffer(transport.NoiseConfig{Static: e.key.Keypair(), Purpose: transport.PurposeRelay, PeerStatic: r.key.Keypair().Public, Payload: payload})
	if err != nil {
		t.Fatal(err)
	}
	replay, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer replay.Close()
	if _, err := replay.Write(offer.Bytes()); err != nil {
		t.Fatal(err)
	}
	var hdr [2]byte
	if _, err := io.ReadFull(replay, hdr[:]); err != nil { // message 2 arrives: the relay has answered
		t.Fatalf("no message 2: %v", err)
	}
	env, err := dialVia(t, r, "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), pinned(e))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env, "/bin/echo", "ok").Output(); err != nil || string(out) != "ok\n" {
		t.Fatalf("%q %v", out, err)
	}
	if st := r.srv.Stats(); st.DataSplices != 0 || st.IdleDataConns != 0 {
		t.Fatalf("an unconfirmed data connection was used: %+v", st)
	}
}

func TestReplayedConnectCannotUseTheSplicedConnection(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 2)
	waitFor(t, testTimeout, "idle data connections", idleDataConns(r, 2))
	front := startRecordingFront(t, r.addr)
	opts := pinned(e)
	opts.Executor, opts.Token, opts.Key = "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), key(t)
	opts.KnownExecutors = filepath.Join(t.TempDir(), "known")
	env, err := client.Dial(ctxT(t), front.url(r), opts)
	if err != nil {
		t.Fatal(err)
	}
	defer env.Close()
	if out, err := client.Command(env, "/bin/echo", "first").Output(); err != nil || string(out) != "first\n" {
		t.Fatalf("%q %v", out, err)
	}
	front.mu.Lock()
	msg1 := bytes.Clone(front.first[0])
	front.mu.Unlock()
	// The client's first bytes: preamble, then message 1 (relay/connect
	// with its own handshake to the executor inside).
	msg1 = msg1[:4+2+(int(msg1[4])<<8|int(msg1[5]))]

	// An attacker replays it, then tries to talk to the executor on the
	// connection the relay splices for it: whatever it sends fails the
	// executor's Noise, and the connection ends.
	waitFor(t, testTimeout, "the pool refilled", idleDataConns(r, 2))
	c, err := net.Dial("tcp", r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(msg1); err != nil {
		t.Fatal(err)
	}
	// A forged record where the client's first would be.
	junk := append([]byte{0, 64}, bytes.Repeat([]byte{0xAA}, 64)...)
	if _, err := c.Write(junk); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(testTimeout))
	got, err := io.ReadAll(c)
	if err != nil {
		t.Fatalf("the replayed connection did not end: %v", err)
	}
	if bytes.Contains(got, []byte("first")) {
		t.Fatal("the replay saw the client's plaintext")
	}
	// The real client's connection is untouched.
	if out, err := client.Command(env, "/bin/echo", "second").Output(); err != nil || string(out) != "second\n" {
		t.Fatalf("%q %v", out, err)
	}
}

func TestEmptyPoolAndLegacyClientsTakeTheYamuxPath(t *testing.T) {
	r := newRelay(t)
	// No data connections: every client is spliced to a stream.
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), -1)
	tok := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	env, err := dialVia(t, r, "x", tok, pinned(e))
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env, "/bin/echo", "via a stream").Output(); err != nil || string(out) != "via a stream\n" {
		t.Fatalf("%q %v", out, err)
	}
	if st := r.srv.Stats(); st.DataSplices != 0 {
		t.Fatalf("%+v", st)
	}

	// One data connection and several clients at once: the first takes
	// it, the others fall back to streams or to its replacement; none
	// waits for one.
	r2 := newRelay(t)
	e2 := joinVia(t, r2.url(), "x", r2.token(t, TokenJoin, CreateOptions{}), key(t), 1)
	waitFor(t, testTimeout, "an idle data connection", idleDataConns(r2, 1))
	tok2 := r2.token(t, TokenClient, CreateOptions{Executors: "*"})
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			env, err := dialVia(t, r2, "x", tok2, pinned(e2))
			if err != nil {
				errs <- err
				return
			}
			out, err := client.Command(env, "/bin/echo", "c", string(rune('0'+i))).Output()
			if err == nil && !strings.HasPrefix(string(out), "c ") {
				err = errors.New("bad output " + string(out))
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	if st := r2.srv.Stats(); st.DataSplices < 1 {
		t.Fatalf("%+v", st)
	}

	// A client of the mux kind (first contact: no pin) is spliced to a
	// data connection all the same.
	waitFor(t, testTimeout, "an idle data connection", idleDataConns(r2, 1))
	before := r2.srv.Stats().DataSplices
	env3, err := dialVia(t, r2, "x", tok2, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env3, "/bin/echo", "legacy").Output(); err != nil || string(out) != "legacy\n" {
		t.Fatalf("%q %v", out, err)
	}
	if st := r2.srv.Stats(); st.DataSplices != before+1 {
		t.Fatalf("the mux client was not spliced to the data connection: %+v", st)
	}
}

func TestConnectInTheHandshakeWithoutEarlyNeedsAHandshakeInItsFirstRecord(t *testing.T) {
	r := newRelay(t)
	joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 1)
	waitFor(t, testTimeout, "an idle data connection", idleDataConns(r, 1))
	tok := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	before := r.srv.Stats()
	c, _, err := relayclient.ConnectEarly(ctxT(t), r.url(), key(t).Keypair(), relayclient.Options{}, "x", tok, nil,
		func(identity.PublicKey) ([]byte, error) { return []byte("GET / HTTP/1.1\r\n\r\n"), nil })
	if err == nil {
		c.Close()
		t.Fatal("the relay gave a verdict on a connection whose first record was no handshake")
	}
	if st := r.srv.Stats(); st.RedeemedTokens != before.RedeemedTokens || st.FailedHandshakes != before.FailedHandshakes+1 {
		t.Fatalf("a connection with no handshake in its first record spent a use or went uncounted: %+v, before %+v", st, before)
	}
	_, _, err = relayclient.ConnectEarly(ctxT(t), r.url(), key(t).Keypair(), relayclient.Options{}, "x", "opt_wrong", []byte("OP\x01\x01"), nil)
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("%v (kind %q), want refused", err, protocol.KindOf(err))
	}
}
