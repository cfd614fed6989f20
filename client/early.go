package client

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/outpost-exec/outpost/transport"
)

// earlyConn is a native connection whose Noise handshake waits for the
// first requests: until launch, what mux writes is held, and launch
// sends it as early data in IK message 1 (transport.EncodeEarlyData) — or,
// if the executor does not take it, as the first records of the channel.
// Either way the executor reads the same byte stream, in order.
type earlyConn struct {
	raw net.Conn

	mu    sync.Mutex
	held  []byte
	nc    net.Conn // the channel, once launched
	err   error
	ready chan struct{} // closed by launch
	once  sync.Once
	done  chan struct{} // closed by Close
}

func newEarlyConn(raw net.Conn) *earlyConn {
	return &earlyConn{raw: raw, ready: make(chan struct{}), done: make(chan struct{})}
}

// launch runs the handshake: hs gets message 1's payload (nil for none)
// and returns the channel. The held bytes go as early data when there is
// room for them, useEarly says so and slot knows the executor's instance
// to name; otherwise, and whenever the executor does not accept them, as
// records. Message 2 tells slot the executor's instance for next time.
func (e *earlyConn) launch(slot earlySlot, useEarly bool, hs func(payload []byte) (*transport.NoiseConn, error)) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	defer close(e.ready)
	var payload []byte
	if useEarly && len(e.held) > 0 && len(e.held) <= transport.MaxEarlyData {
		if inst, ok := slot.lookup(); ok {
			payload = transport.EncodeEarlyData(time.Now(), inst, e.held)
		}
	}
	nc, err := hs(payload)
	if err != nil {
		e.err = err
		return err
	}
	reply := transport.ParseEarlyReply(nc.HandshakeReply())
	if useEarly {
		slot.learn(nc.PeerStatic(), reply)
	}
	if payload != nil && reply.Status == transport.EarlyDataReplayed {
		// A copy of this message 1 reached the executor first and its
		// requests (a process/start) may have run: re-sending them in
		// band could run them twice.
		e.err = ErrEarlyDataReplayed
		nc.Close()
		return e.err
	}
	// Refused (EarlyDataRefused, or EarlyDataOtherInstance: the executor
	// restarted, or another process with its key answered, and took
	// nothing): the same bytes go as the channel's first records — a full
	// handshake's round trip, and no error.
	if len(e.held) > 0 && (payload == nil || reply.Status != transport.EarlyDataAccepted) {
		if _, err := nc.Write(e.held); err != nil {
			e.err = err
			nc.Close()
			return err
		}
	}
	e.held, e.nc = nil, nc
	return nil
}

func (e *earlyConn) Read(p []byte) (int, error) {
	select {
	case <-e.ready:
	case <-e.done:
		return 0, net.ErrClosed
	}
	if e.err != nil {
		return 0, e.err
	}
	return e.nc.Read(p)
}

func (e *earlyConn) Write(p []byte) (int, error) {
	e.mu.Lock()
	nc, err := e.nc, e.err
	if nc == nil && err == nil {
		select {
		case <-e.done:
			err = net.ErrClosed
		default:
			e.held = append(e.held, p...)
		}
	}
	e.mu.Unlock()
	switch {
	case err != nil:
		return 0, err
	case nc != nil:
		return nc.Write(p)
	}
	return len(p), nil
}

// WriteBuffers keeps a multiplexer's header and body in one record batch
// once the channel is up (before, they are held like any write).
func (e *earlyConn) WriteBuffers(bufs ...[]byte) (int, error) {
	e.mu.Lock()
	nc := e.nc
	e.mu.Unlock()
	if w, ok := nc.(interface {
		WriteBuffers(...[]byte) (int, error)
	}); ok {
		return w.WriteBuffers(bufs...)
	}
	n := 0
	for _, b := range bufs {
		m, err := e.Write(b)
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Close closes the connection, cutting a handshake in progress short.
func (e *earlyConn) Close() error {
	e.once.Do(func() { close(e.done) })
	return e.raw.Close()
}

func (e *earlyConn) LocalAddr() net.Addr                { return e.raw.LocalAddr() }
func (e *earlyConn) RemoteAddr() net.Addr               { return e.raw.RemoteAddr() }
func (e *earlyConn) SetDeadline(t time.Time) error      { return e.raw.SetDeadline(t) }
func (e *earlyConn) SetReadDeadline(t time.Time) error  { return e.raw.SetReadDeadline(t) }
func (e *earlyConn) SetWriteDeadline(t time.Time) error { return e.raw.SetWriteDeadline(t) }

// ErrEarlyDataReplayed: the executor had already taken this connection's
// early data from a copy of its first message (someone recorded and raced
// it); the requests in it may have run, so they are not sent again.
var ErrEarlyDataReplayed = errors.New("client: the executor received a copy of this connection's early data first (replayed on the network?); not re-sending the requests it carried")

// launchFunc completes a connection's handshake (see conn.launch).
type launchFunc func(ctx context.Context) error
