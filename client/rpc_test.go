package client

import (
	"context"
	"errors"
	"io"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// pipePair returns a client RPC and the server end of an in-memory line
// connection.
func pipePair(t *testing.T, onNotify func(string, transport.Params)) (*RPC, *transport.JSONConn) {
	t.Helper()
	c2sR, c2sW := io.Pipe()
	s2cR, s2cW := io.Pipe()
	cli := NewRPC(transport.NewJSONConn(transport.NewLineFrames(s2cR, c2sW, c2sW, 0)), onNotify)
	srv := transport.NewJSONConn(transport.NewLineFrames(c2sR, s2cW, s2cW, 0))
	t.Cleanup(func() { cli.Close(); srv.Close() })
	return cli, srv
}

func TestRPCMatchesOutOfOrderResponsesByID(t *testing.T) {
	cli, srv := pipePair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	type res struct {
		method string
		got    protocol.InitializeResult
		err    error
	}
	results := make(chan res, 2)
	for _, m := range []string{"first", "second"} {
		go func() {
			var r protocol.InitializeResult
			err := cli.Call(ctx, m, nil, &r)
			results <- res{m, r, err}
		}()
	}
	a, err := srv.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := srv.ReadMessage(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// Answer the later request first; each caller must get its own reply.
	srv.WriteResult(ctx, b.ID, protocol.InitializeResult{SessionID: b.Method})
	srv.WriteResult(ctx, a.ID, protocol.InitializeResult{SessionID: a.Method})
	for i := 0; i < 2; i++ {
		r := <-results
		if r.err != nil || r.got.SessionID != r.method {
			t.Fatalf("%s got %+v, %v", r.method, r.got, r.err)
		}
	}
}

func TestRPCReturnsProtocolErrors(t *testing.T) {
	cli, srv := pipePair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cli.Call(ctx, "x", nil, nil) }()
	m, _ := srv.ReadMessage(ctx)
	srv.WriteError(ctx, m.ID, protocol.Errorf(protocol.CodeMethodNotFound, "nope"))
	var pe *protocol.Error
	if err := <-errc; !errors.As(err, &pe) || pe.Code != protocol.CodeMethodNotFound {
		t.Fatalf("err = %v", err)
	}
}

func TestRPCPendingCallFailsWhenConnectionDrops(t *testing.T) {
	cli, srv := pipePair(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- cli.Call(ctx, "x", nil, nil) }()
	srv.ReadMessage(ctx)
	srv.Close()
	if err := <-errc; !errors.Is(err, ErrClosed) {
		t.Fatalf("err = %v, want ErrClosed", err)
	}
	if err := cli.Call(ctx, "y", nil, nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("call after close: %v", err)
	}
}

func TestRPCDeliversNotificationsInOrder(t *testing.T) {
	got := make(chan uint64, 3)
	_, srv := pipePair(t, func(method string, p transport.Params) {
		var n protocol.OutputNotification
		if method == protocol.MethodProcessOutput && p.Decode(&n) == nil {
			got <- n.Seq
		}
	})
	ctx := context.Background()
	for seq := uint64(1); seq <= 3; seq++ {
		srv.WriteNotification(ctx, protocol.MethodProcessOutput, &protocol.OutputNotification{ProcessID: "p", Seq: seq, Stream: protocol.StreamStdout, Chunk: []byte("x")})
	}
	for want := uint64(1); want <= 3; want++ {
		select {
		case seq := <-got:
			if seq != want {
				t.Fatalf("seq %d, want %d", seq, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("notification not delivered")
		}
	}
}
