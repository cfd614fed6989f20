package relay

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// neverConfirmingFront (from the red team) is an attacker's tool: it looks to a stock client like
// a native (tcp://) executor, but carries the client's inner IK message 1
// (with its 0-RTT early data) to the relay as relay/connect {early, confirm}
// under a fresh relay key (stamped fresh, or not), passes the relay's raw
// bytes back, and never sends the confirmation record.
func neverConfirmingFront(t *testing.T, r *testRelay, id, tok string, stamp bool) net.Listener {
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
				hdr := make([]byte, 6)
				if _, err := io.ReadFull(c, hdr); err != nil {
					return
				}
				early := append(hdr, make([]byte, int(hdr[4])<<8|int(hdr[5]))...)
				if _, err := io.ReadFull(c, early[6:]); err != nil {
					return
				}
				params := protocol.RelayConnectParams{ExecutorID: id, Token: tok, Early: early, Confirm: true}
				if stamp {
					params.Fresh = make([]byte, freshLen)
					binary.BigEndian.PutUint64(params.Fresh, uint64(time.Now().UnixMilli()))
					rand.Read(params.Fresh[8:])
				}
				payload, _ := transport.PayloadRequest(transport.IntID(1), protocol.MethodRelayConnect, params)
				raw, err := net.Dial("tcp", r.addr)
				if err != nil {
					return
				}
				defer raw.Close()
				ak, _ := identity.Generate() // a fresh relay-side key per connection
				nc, err := transport.NoiseInitiator(ctxT(t), raw, transport.NoiseConfig{Static: ak.Keypair(), Purpose: Purpose, PeerStatic: r.key.Keypair().Public, Payload: payload})
				if err != nil {
					return
				}
				d, err := nc.Detach()
				if err != nil {
					return
				}
				go io.Copy(io.Discard, c) // the client's later bytes: dropped, no confirmation ever
				io.Copy(c, d)
			}()
		}
	}()
	return ln
}

// A token holder's front that never confirms (the red team's attack on
// a speculative early write): a token of one use runs commands for any
// number of client keys only if the relay writes their inner handshake
// (0-RTT process/start) unpaid. Unstamped, nothing reaches the executor;
// stamped fresh, the first key spends the one use and the others are
// refused.
func TestAConnectThatNeverConfirmsRunsNothingUnpaid(t *testing.T) {
	for _, stamp := range []bool{false, true} {
		t.Run(fmt.Sprintf("fresh=%v", stamp), func(t *testing.T) { checkNeverConfirming(t, stamp) })
	}
}

func checkNeverConfirming(t *testing.T, stamp bool) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 2)
	tok := r.token(t, TokenClient, CreateOptions{Uses: 1, Executors: "*"})
	front := neverConfirmingFront(t, r, "x", tok, stamp)
	known := filepath.Join(t.TempDir(), "known")
	marker := filepath.Join(t.TempDir(), "ran")
	dial := func() (*client.Remote, error) {
		cfg := pinned(e)
		cfg.Key, cfg.KnownExecutors = key(t), known // a new client key every time
		return client.Dial(ctxT(t), "tcp://"+front.Addr().String(), cfg)
	}
	// First: learn the executor's instance (initialize cannot be answered:
	// without an instance on record it goes as records after message 2,
	// which the front drops).
	start := time.Now()
	_, err := dial()
	b, _ := os.ReadFile(known + ".instances")
	t.Logf("first dial: %v after %v; instances %q", err, time.Since(start), b)
	const keys = 5
	for i := range keys {
		start := time.Now()
		cfg := pinned(e)
		cfg.Key, cfg.KnownExecutors = key(t), known // a new client key every time
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		env, p, err := client.DialStart(ctx, "tcp://"+front.Addr().String(), cfg,
			protocol.ExecParams{ProcessID: "p", Argv: []string{"/bin/sh", "-c", "echo hit >> " + marker}, Env: env0})
		t.Logf("key %d: DialStart %v after %v", i, err, time.Since(start))
		if p != nil {
			res, err := p.Wait(ctx)
			t.Logf("key %d: wait %+v %v", i, res, err)
		}
		cancel()
		if env != nil {
			env.Close()
		}
	}
	b, _ = os.ReadFile(marker)
	runs := strings.Count(string(b), "hit")
	used := tokenUsed(t, r, tok)
	t.Logf("commands run: %d, token uses spent: %d, redeemed: %d", runs, used, r.srv.Stats().RedeemedTokens)
	if runs > used || used > 1 || (!stamp && runs > 0) {
		t.Errorf("%d commands ran on the executor from %d distinct client keys on a 1-use token, with %d uses spent", runs, keys, used)
	}
}
