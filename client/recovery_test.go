package client

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// refusingDial answers the first dials with the given errors, as a relay
// or executor would, then dials for real.
type refusingDial struct {
	mu      sync.Mutex
	answers []error
	dials   int
	next    dialFunc
}

func (d *refusingDial) dial(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
	d.mu.Lock()
	d.dials++
	var err error
	if len(d.answers) > 0 {
		err, d.answers = d.answers[0], d.answers[1:]
	}
	d.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return d.next(ctx, route)
}

// A relay says -32600 for more than an unknown session: "shutting down;
// connect again", "too many connections to this executor". Only an
// unknown_session (or a refusal) ends the resume; the others are waited
// out with backoff, and the session and its processes survive.
func TestRecoveryDecidesByKind(t *testing.T) {
	ex := startExecutor(t, nil)
	cases := []struct {
		name    string
		answers []error
		survive bool
	}{
		{"a full relay, then one shutting down", []error{
			protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/connect: executor x has 1 connections, the most this relay allows"),
			protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: the relay is shutting down; connect again"),
		}, true},
		{"an executor briefly offline", []error{
			protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/connect: executor x is offline"),
		}, true},
		{"an internal failure", []error{
			protocol.KindErrorf(protocol.KindInternal, protocol.CodeInternal, "relay/connect: token store: disk on fire"),
		}, true},
		{"an unknown session", []error{
			protocol.KindErrorf(protocol.KindUnknownSession, protocol.CodeInvalidRequest, "initialize: unknown session id s"),
		}, false},
		{"a refusal", []error{
			protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/connect: token has been revoked"),
		}, false},
		{"a peer without kinds: -32600", []error{
			protocol.Errorf(protocol.CodeInvalidRequest, "unknown session id s"),
		}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			env := dial(t, ex.url, Config{RecoveryTimeout: 20 * time.Second})
			d := &refusingDial{answers: c.answers, next: env.dial}
			env.dial = d.dial
			p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"sleep", "60"}, Env: testEnv})
			if err != nil {
				t.Fatal(err)
			}
			started := time.Now()
			env.dropConnection()
			if !c.survive {
				select {
				case <-p.Done():
				case <-time.After(5 * time.Second):
					t.Fatal("the process did not fail promptly")
				}
				if p.Err() == nil || time.Since(started) > 5*time.Second {
					t.Fatalf("failure %v after %v", p.Err(), time.Since(started))
				}
				if env.Err() == nil {
					t.Fatal("the Remote did not give up")
				}
				return
			}
			deadline := time.Now().Add(testTimeout)
			for env.Reconnects() == 0 {
				select {
				case <-p.Done():
					t.Fatalf("the process failed: %v", p.Err())
				default:
				}
				if time.Now().After(deadline) {
					t.Fatal("no resume")
				}
				time.Sleep(10 * time.Millisecond)
			}
			d.mu.Lock()
			dials := d.dials
			d.mu.Unlock()
			if dials != len(c.answers)+1 {
				t.Fatalf("%d dials, want %d", dials, len(c.answers)+1)
			}
			if _, err := p.Terminate(ctxT(t)); err != nil {
				t.Fatal(err)
			}
			if _, err := p.Wait(ctxT(t)); err != nil {
				t.Fatalf("after the resume: %v", err)
			}
			var pe *protocol.Error
			if errors.As(p.Err(), &pe) {
				t.Fatal(pe)
			}
		})
	}
}
