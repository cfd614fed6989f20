// Package client is the Go SDK for outpost executors.
//
// RPC is the low-level connection: requests matched to responses by id
// (in any order), and notifications routed per process. Session, built on
// it, runs the initialize handshake and hands out Process proxies.
package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
	"github.com/outpost-exec/outpost/transport/mux"
)

// ErrClosed is returned by calls on a closed or failed connection.
var ErrClosed = errors.New("exec-server connection closed")

// RPC is a client connection to an exec-server.
type RPC struct {
	mc     transport.MessageConn
	nextID atomic.Int64
	wmu    sync.Mutex

	mu      sync.Mutex
	pending map[int64]*waiter
	err     error
	done    chan struct{}

	onNotify func(method string, params transport.Params)
}

// waiter is a request waiting for its answer. An ordered one (CallThen)
// holds back the notifications read after its answer until its caller has
// handled the answer: so a front end that relays both (the codex bridge)
// passes on a reply before the notifications the executor sent after it.
type waiter struct {
	ch        chan rpcReply
	ordered   bool
	abandoned chan struct{} // closed when the caller stops waiting
}

type rpcReply struct {
	result  transport.Params
	err     *protocol.Error
	handled chan struct{} // ordered: closed by the caller once it has handled the reply
}

// DialOptions configure Dial.
type DialOptions struct {
	// Token is sent as "Authorization: Bearer <token>".
	Token string
	// Header adds request headers to the upgrade (tests).
	Header http.Header
}

// DialWS connects to a ws:// exec-server (outpost or codex).
func DialWS(ctx context.Context, url string, opts DialOptions, onNotify func(method string, params transport.Params)) (*RPC, error) {
	h := http.Header{}
	for k, v := range opts.Header {
		h[k] = v
	}
	if opts.Token != "" {
		h.Set("Authorization", "Bearer "+opts.Token)
	}
	c, resp, err := websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: h, CompressionMode: websocket.CompressionDisabled})
	if err != nil {
		if resp != nil {
			return nil, fmt.Errorf("dial %s: HTTP %d: %w", url, resp.StatusCode, err)
		}
		return nil, fmt.Errorf("dial %s: %w", url, err)
	}
	return NewRPC(transport.NewJSONConn(transport.NewWSFrames(c, 0)), onNotify), nil
}

// NewRPC runs the client side of mc. onNotify is called on the reading
// goroutine for every notification, in arrival order; it may block to
// apply backpressure.
func NewRPC(mc transport.MessageConn, onNotify func(method string, params transport.Params)) *RPC {
	r := &RPC{mc: mc, pending: make(map[int64]*waiter), done: make(chan struct{}), onNotify: onNotify}
	go r.readLoop()
	return r
}

func (r *RPC) readLoop() {
	var err error
	// hold is the last ordered answer handed over: no notification is
	// delivered until its caller has handled it (or stopped waiting).
	var hold *waiter
	var handled chan struct{}
	for {
		var m *transport.Message
		m, err = r.mc.ReadMessage(context.Background())
		if err != nil {
			var me *transport.MalformedError
			if errors.As(err, &me) {
				continue
			}
			break
		}
		switch m.Kind {
		case transport.KindResponse:
			if m.ID.IsStr {
				continue
			}
			r.mu.Lock()
			w := r.pending[m.ID.Num]
			delete(r.pending, m.ID.Num)
			r.mu.Unlock()
			if w != nil {
				rep := rpcReply{result: m.Result, err: m.Error}
				if w.ordered {
					rep.handled = make(chan struct{})
					hold, handled = w, rep.handled
				}
				w.ch <- rep
			}
		case transport.KindNotification:
			if hold != nil {
				select {
				case <-handled:
				case <-hold.abandoned:
				}
				hold, handled = nil, nil
			}
			if r.onNotify != nil {
				r.onNotify(m.Method, m.Params)
			}
		}
	}
	r.fail(fmt.Errorf("%w: %v", ErrClosed, err))
}

func (r *RPC) fail(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
		close(r.done)
	}
	r.mu.Unlock()
}

// Done is closed when the connection has ended.
func (r *RPC) Done() <-chan struct{} { return r.done }

// Err returns why the connection ended.
func (r *RPC) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Call sends a request and decodes its result into result (if non-nil).
// A JSON-RPC error is returned as *protocol.Error.
func (r *RPC) Call(ctx context.Context, method string, params, result any) error {
	pc, err := r.Send(ctx, method, params)
	if err != nil {
		return err
	}
	return pc.Wait(ctx, result)
}

// CallThen is Call for a caller that relays the answer and the
// connection's notifications alike: then runs with Call's error once the
// answer is in (result decoded), and notifications read after the answer
// are delivered only once then has returned. It returns what then was
// given.
func (r *RPC) CallThen(ctx context.Context, method string, params, result any, then func(error)) error {
	pc, err := r.send(ctx, method, params, true)
	if err != nil {
		then(err)
		return err
	}
	err = pc.wait(ctx, result, then)
	return err
}

// Pending is a request sent and not yet answered (see Send).
type Pending struct {
	r      *RPC
	id     int64
	method string
	w      *waiter
}

// Send writes a request and returns at once, without waiting for its
// answer: requests sent in turn are written in that order, so a client may
// pipeline several (initialize, then process/start) in one round trip.
// Wait collects the answer.
func (r *RPC) Send(ctx context.Context, method string, params any) (*Pending, error) {
	return r.send(ctx, method, params, false)
}

func (r *RPC) send(ctx context.Context, method string, params any, ordered bool) (*Pending, error) {
	id := r.nextID.Add(1)
	w := &waiter{ch: make(chan rpcReply, 1), ordered: ordered, abandoned: make(chan struct{})}
	r.mu.Lock()
	if r.err != nil {
		r.mu.Unlock()
		return nil, r.err
	}
	r.pending[id] = w
	r.mu.Unlock()
	r.wmu.Lock()
	err := r.mc.WriteRequest(ctx, transport.IntID(id), method, params)
	r.wmu.Unlock()
	if err != nil {
		r.mu.Lock()
		delete(r.pending, id)
		r.mu.Unlock()
		if brokenPipe(err) {
			// The connection broke under the write: the caller retries
			// what is safe to retry on the resumed session, as when it
			// breaks while the request waits for its answer.
			return nil, fmt.Errorf("%s: %w: %v", method, ErrClosed, err)
		}
		return nil, fmt.Errorf("%s: %w", method, err)
	}
	return &Pending{r: r, id: id, method: method, w: w}, nil
}

// Wait waits for the request's answer and decodes its result into result
// (if non-nil). A JSON-RPC error is returned as *protocol.Error. Call it
// at most once.
func (p *Pending) Wait(ctx context.Context, result any) error {
	return p.wait(ctx, result, nil)
}

// wait is Wait, running then (when set) with the outcome before an
// ordered answer is released to later notifications.
func (p *Pending) wait(ctx context.Context, result any, then func(error)) error {
	r := p.r
	var rep rpcReply
	select {
	case rep = <-p.w.ch:
	case <-ctx.Done():
		r.mu.Lock()
		delete(r.pending, p.id)
		r.mu.Unlock()
		close(p.w.abandoned) // an answer handed over meanwhile holds nothing back
		err := ctx.Err()
		if then != nil {
			then(err)
		}
		return err
	case <-r.done:
		select {
		case rep = <-p.w.ch: // answered just before the end
		default:
			err := r.Err()
			if then != nil {
				then(err)
			}
			return err
		}
	}
	if rep.handled != nil {
		defer close(rep.handled)
	}
	err := rep.decode(p.method, result)
	if then != nil {
		then(err)
	}
	return err
}

func (rep rpcReply) decode(method string, result any) error {
	if rep.err != nil {
		return rep.err
	}
	if result != nil {
		if err := rep.result.Decode(result); err != nil {
			return fmt.Errorf("%s: decoding result: %w", method, err)
		}
	}
	return nil
}

// Notify sends a notification.
func (r *RPC) Notify(ctx context.Context, method string, params any) error {
	r.wmu.Lock()
	defer r.wmu.Unlock()
	return r.mc.WriteNotification(ctx, method, params)
}

// Close closes the connection.
func (r *RPC) Close() error {
	err := r.mc.Close()
	r.fail(ErrClosed)
	return err
}

// brokenPipe reports a write that failed because the connection under it
// is gone (not a refusal of the message itself: those are not retried).
func brokenPipe(err error) bool {
	return errors.Is(err, mux.ErrStreamClosed) || errors.Is(err, mux.ErrStreamReset) || errors.Is(err, mux.ErrSessionShutdown) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, io.ErrClosedPipe) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
}
