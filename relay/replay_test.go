package relay

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
)

// innerHello is the shape of a client's first record on a relay/connect
// made in the handshake (preamble and IK message 1 of its handshake with
// the executor), with a body no executor would accept: enough for tests
// of the relay's side.
var innerHello = []byte("OP\x01\x01\x00\x05hello")

// tokenUsed is how many uses of the token with secret have been spent.
func tokenUsed(t *testing.T, r *testRelay, secret string) int {
	t.Helper()
	key, _, err := tokenKey(secret)
	if err != nil {
		t.Fatal(err)
	}
	var rec tokenRecord
	err = r.tokens.view(func(tx storeTx) error {
		buf, err := tx.get(bucketTokens, key)
		if err != nil {
			return err
		}
		return json.Unmarshal(buf, &rec)
	})
	if err != nil {
		t.Fatal(err)
	}
	return rec.Used
}

// A passive observer who recorded a client's first message to the relay
// (relay/connect in IK message 1) and replays it hundreds of times gets
// nothing: no token use is spent, no slot is held, nothing reaches the
// executor, its address is refused for its failed handshakes, and real
// clients connect meanwhile.
func TestReplayedConnectFloodSpendsNothingAndLocksNoOneOut(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 2)
	waitFor(t, testTimeout, "idle data connections", idleDataConns(r, 2))
	front := startRecordingFront(t, r.addr)
	tok := r.token(t, TokenClient, CreateOptions{Uses: 3, Executors: "*"})
	opts := pinned(e)
	opts.Executor, opts.Token, opts.Key = "x", tok, key(t)
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
	msg1 = msg1[:4+2+(int(msg1[4])<<8|int(msg1[5]))]
	if used := tokenUsed(t, r, tok); used != 1 {
		t.Fatalf("the real client spent %d uses, want 1", used)
	}
	before := r.srv.Stats()

	// The replays come from another source address (127.0.0.2), as an
	// observer's would: they are counted as failed handshakes there.
	const replays = 300
	var held sync.WaitGroup
	stop := make(chan struct{})
	answered := make(chan bool, replays)
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}, Timeout: testTimeout}
	replay := func(i int) {
		held.Add(1)
		go func() {
			defer held.Done()
			c, err := dialer.Dial("tcp", r.addr)
			if err != nil {
				answered <- false
				return
			}
			defer c.Close()
			c.Write(msg1)
			c.SetReadDeadline(time.Now().Add(testTimeout))
			var b [1]byte
			_, err = c.Read(b[:])
			answered <- err == nil
			if i%2 == 0 {
				<-stop // half of them sit on their connection
			}
		}()
	}
	// At the attack's pace (about 170 a second), the real client
	// arriving in the middle of it.
	tick := time.NewTicker(6 * time.Millisecond)
	defer tick.Stop()
	for i := range replays / 2 {
		<-tick.C
		replay(i)
	}
	go func() {
		for i := replays / 2; i < replays; i++ {
			<-tick.C
			replay(i)
		}
	}()
	// Meanwhile a real client, on its own key, connects and is served at
	// once.
	start := time.Now()
	opts2 := pinned(e)
	opts2.Executor, opts2.Token, opts2.Key = "x", tok, key(t)
	opts2.KnownExecutors = filepath.Join(t.TempDir(), "known")
	env2, err := client.Dial(ctxT(t), r.url(), opts2)
	if err != nil {
		t.Fatalf("a real client during the replay flood: %v", err)
	}
	defer env2.Close()
	// A second in the terms; 3 under -race on a loaded 2-core
	// machine (the replays' handshakes are CPU, not waiting).
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("a real client took %v to connect during the replay flood", d)
	}
	if out, err := client.Command(env2, "/bin/echo", "during").Output(); err != nil || string(out) != "during\n" {
		t.Fatalf("%q %v", out, err)
	}
	got := 0
	for range replays {
		if <-answered {
			got++
		}
	}
	st := r.srv.Stats()
	close(stop)
	held.Wait()
	if used := tokenUsed(t, r, tok); used != 2 {
		t.Errorf("%d replays (%d answered in message 2) left the token with %d uses spent, want 2 (the two real clients)", replays, got, used)
	}
	if st.RedeemedTokens != before.RedeemedTokens+1 {
		t.Errorf("redemptions during the flood: %d, want 1 (the real client)", st.RedeemedTokens-before.RedeemedTokens)
	}
	// The relay took the original's freshness stamp: every replay waits
	// for a confirmation, holding nothing.
	if st.SplicedStreams > 2 {
		t.Errorf("%d splices held while the replays sat on their connections, want at most the 2 real clients'", st.SplicedStreams)
	}
	if st.DataSplices > before.DataSplices+1 {
		t.Errorf("the replays reached the executor: %d data splices, want %d", st.DataSplices, before.DataSplices+1)
	}
	// Replays that hang up are failed handshakes of their address, which
	// the relay then refuses (Config.MaxFailedHandshakes).
	waitFor(t, testTimeout, "the replaying address refused", func() bool {
		st := r.srv.Stats()
		return st.FailedHandshakes >= before.FailedHandshakes+20 && st.BlockedAddresses >= 1
	})
	// The first client's session is untouched.
	if out, err := client.Command(env, "/bin/echo", "after").Output(); err != nil || string(out) != "after\n" {
		t.Fatalf("%q %v", out, err)
	}
}

// connectAs makes a relay/connect on the mux path with client key k and
// keeps the spliced stream open until the test ends.
func connectAs(t *testing.T, r *testRelay, k identity.Key, id, token string) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	rc, err := relayclient.Dial(ctx, r.url(), k.Keypair(), relayclient.Options{})
	if err != nil {
		return err
	}
	if _, _, err := rc.Connect(ctx, id, token); err != nil {
		rc.Close()
		return err
	}
	t.Cleanup(func() { rc.Close() })
	return nil
}

// One token, or one client key, cannot take all of an executor's splice
// slots: past its share it is refused as exhausted while others connect.
func TestOneTokenOrClientKeyHoldsOnlyItsShareOfAnExecutorsSlots(t *testing.T) {
	r := startRelayWith(t, Config{MaxStreamsPerExecutor: 8, MaxStreamsPerToken: 4, MaxStreamsPerClient: 2})
	joinOne(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 0)
	hoarder := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	for i := range 4 {
		if err := connectAs(t, r, key(t), "x", hoarder); err != nil {
			t.Fatalf("connection %d on one token: %v", i, err)
		}
	}
	if err := connectAs(t, r, key(t), "x", hoarder); protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("a 5th connection on one token of share 4: %v (kind %q), want exhausted", err, protocol.KindOf(err))
	}
	// The early path judges the same share before it answers.
	if _, _, err := relayclient.ConnectEarly(ctxT(t), r.url(), key(t).Keypair(), relayclient.Options{}, "x", hoarder, innerHello, nil); protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("the same in the handshake: %v (kind %q), want exhausted", err, protocol.KindOf(err))
	}
	// Another token still gets in; one key on it holds two at most.
	other := r.token(t, TokenClient, CreateOptions{Executors: "*"})
	k := key(t)
	for i := range 2 {
		if err := connectAs(t, r, k, "x", other); err != nil {
			t.Fatalf("connection %d of one key: %v", i, err)
		}
	}
	if err := connectAs(t, r, k, "x", other); protocol.KindOf(err) != protocol.KindExhausted {
		t.Fatalf("a 3rd connection of one key of share 2: %v (kind %q), want exhausted", err, protocol.KindOf(err))
	}
	if err := connectAs(t, r, key(t), "x", other); err != nil {
		t.Fatalf("another key on the second token: %v", err)
	}
	if st := r.srv.Stats(); st.SplicedStreams != 7 {
		t.Fatalf("spliced %d, want 7", st.SplicedStreams)
	}
}

// A token's uses count clients, not connections: a client reconnecting
// (its session resumed, its next command) spends nothing more, on either
// path; another client key finds the token used up.
func TestATokenUseAdmitsOneClientKeyAndItsReconnects(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 1)
	tok := r.token(t, TokenClient, CreateOptions{Uses: 1, Executors: "*"})
	k := key(t)
	known := filepath.Join(t.TempDir(), "known")
	for i := range 3 {
		// The raw path (a pinned client), then the mux path.
		opts := pinned(e)
		opts.Executor, opts.Token, opts.Key, opts.KnownExecutors = "x", tok, k, known
		env, err := client.Dial(ctxT(t), r.url(), opts)
		if err != nil {
			t.Fatalf("connect %d of one key on a 1-use token: %v", i, err)
		}
		if out, err := client.Command(env, "/bin/echo", "ok").Output(); err != nil || string(out) != "ok\n" {
			t.Fatalf("%q %v", out, err)
		}
		env.Close()
		rc, err := relayclient.Dial(ctxT(t), r.url(), k.Keypair(), relayclient.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if _, _, err := rc.Connect(ctxT(t), "x", tok); err != nil {
			t.Fatalf("mux connect %d of one key on a 1-use token: %v", i, err)
		}
		rc.Close()
	}
	if used := tokenUsed(t, r, tok); used != 1 {
		t.Fatalf("6 connects of one key spent %d uses, want 1", used)
	}
	_, _, err := relayclient.ConnectEarly(ctxT(t), r.url(), key(t).Keypair(), relayclient.Options{}, "x", tok, innerHello, nil)
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("another key on the used-up token: %v (kind %q), want refused", err, protocol.KindOf(err))
	}
}
