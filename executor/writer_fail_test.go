package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/transport"
)

// stuckFrames is a transport whose peer never reads: every write blocks
// until the transport is closed, and then fails. Reads serve the queued
// requests, then wait for the close.
type stuckFrames struct {
	in     chan []byte
	closed chan struct{}
	once   sync.Once
}

func (f *stuckFrames) ReadFrame(ctx context.Context) ([]byte, error) {
	select {
	case b := <-f.in:
		return b, nil
	case <-f.closed:
		return nil, errors.New("closed")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (f *stuckFrames) WriteFrame(ctx context.Context, b []byte) error {
	select {
	case <-f.closed:
	case <-ctx.Done():
	}
	return errors.New("the peer went away")
}

func (f *stuckFrames) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

// A connection whose peer stops reading fills its reply queue, and the
// requests behind it wait for room. When the transport then fails, the
// writer gives up and the connection must end — the waiting requests
// woken, not left to hold it for ever.
func TestAConnectionEndsWhenItsWriterFailsUnderAFullQueue(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	f := &stuckFrames{in: make(chan []byte, 2*maxPendingReplies+8), closed: make(chan struct{})}
	f.in <- []byte(`{"id":0,"method":"initialize","params":{"clientName":"t"}}`)
	f.in <- []byte(`{"method":"initialized"}`)
	for i := range 2 * maxPendingReplies {
		f.in <- []byte(fmt.Sprintf(`{"id":%d,"method":"environment/info"}`, i+1))
	}
	done := make(chan error, 1)
	go func() { done <- srv.ServeConn(context.Background(), transport.NewJSONConn(f)) }()
	// Let the queue fill: the read loop then waits for room.
	deadline := time.Now().Add(10 * time.Second)
	for len(f.in) > maxPendingReplies && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	f.Close()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the connection did not end after its transport failed under a full reply queue")
	}
}
