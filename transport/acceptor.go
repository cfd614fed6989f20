package transport

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"
)

// Acceptor serves a listener: at most max connections at once (the
// accept loop waits for a slot), each handled on its own goroutine and
// closed when its handler returns. Close stops accepting, closes every
// open connection and waits for the handlers.
type Acceptor struct {
	ln    net.Listener
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	slots chan struct{}

	mu   sync.Mutex
	open map[net.Conn]struct{}
}

// Serve starts accepting on ln. handle's context ends when the Acceptor
// closes.
func Serve(ln net.Listener, max int, handle func(ctx context.Context, c net.Conn)) *Acceptor {
	ctx, stop := context.WithCancel(context.Background())
	a := &Acceptor{ln: ln, ctx: ctx, stop: stop, slots: make(chan struct{}, max), open: map[net.Conn]struct{}{}}
	a.wg.Add(1)
	go a.loop(handle)
	return a
}

func (a *Acceptor) loop(handle func(ctx context.Context, c net.Conn)) {
	defer a.wg.Done()
	for {
		select {
		case a.slots <- struct{}{}:
		case <-a.ctx.Done():
			return
		}
		c, err := a.ln.Accept()
		if err != nil {
			<-a.slots
			if a.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient failure (out of file descriptors): back off
			// briefly rather than spin.
			select {
			case <-time.After(50 * time.Millisecond):
			case <-a.ctx.Done():
				return
			}
			continue
		}
		a.mu.Lock()
		a.open[c] = struct{}{}
		a.mu.Unlock()
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			defer func() { <-a.slots }()
			defer func() {
				a.mu.Lock()
				delete(a.open, c)
				a.mu.Unlock()
				c.Close()
			}()
			handle(a.ctx, c)
		}()
	}
}

// Addr is the listener's address.
func (a *Acceptor) Addr() net.Addr { return a.ln.Addr() }

// StopAccepting closes the listener; open connections keep running until
// Close.
func (a *Acceptor) StopAccepting() error {
	err := a.ln.Close()
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}

// Close stops accepting, closes every open connection and waits for the
// handlers to return.
func (a *Acceptor) Close() error {
	a.stop()
	err := a.ln.Close()
	a.mu.Lock()
	for c := range a.open {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
	return err
}
