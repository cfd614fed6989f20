package executor

import (
	"context"
	"io"
	"net/http"
	"sync/atomic"

	"github.com/outpost-exec/outpost/protocol"
)

// httpStreamsRunning counts the stream goroutines of every connection, so
// tests can see that none outlives its connection.
var httpStreamsRunning atomic.Int64

// httpStream is a streamed http/request's body on its way to the client
// as http/request/bodyDelta notifications.
type httpStream struct {
	c         *serverConn
	id        string
	resp      *http.Response
	ctx       context.Context // the request's: its timeout, and the connection's life
	cancel    context.CancelFunc
	timeoutMs *uint64
}

// start sends the body from a goroutine of its own (one per stream,
// within maxHTTPInFlight). It is called once the reply with the headers
// is queued, so the first delta follows it.
func (s *httpStream) start() {
	httpStreamsRunning.Add(1)
	go func() {
		defer httpStreamsRunning.Add(-1)
		s.run()
	}()
}

// abandon releases a stream whose reply will never be sent (the
// connection closed first).
func (s *httpStream) abandon() { s.finish() }

func (s *httpStream) finish() {
	s.resp.Body.Close()
	s.cancel()
	s.c.http.end(s.c, s.id, true)
}

// run reads the body and sends it: a delta per read (at most
// httpDeltaBytes, each its own copy, so an SSE event goes out as soon as
// it arrives), then the last delta, done, with the error if the body
// broke off. notify waits while the connection's reply queue is full:
// a client that stops reading stops the stream, and the upstream server
// with it, instead of filling the executor's memory. The connection's end
// cancels the request (s.ctx), which ends the read, and the outbox's
// shutdown ends a wait in notify.
func (s *httpStream) run() {
	defer s.finish()
	buf := make([]byte, httpDeltaBytes)
	seq := uint64(1)
	for {
		n, err := s.resp.Body.Read(buf)
		if n > 0 {
			delta := protocol.HTTPBodyDelta{RequestID: s.id, Seq: seq, Delta: append([]byte(nil), buf[:n]...)}
			if !s.c.notify(protocol.MethodHTTPRequestBodyDelta, delta) {
				return
			}
			seq++
		}
		if err == nil {
			continue
		}
		last := protocol.HTTPBodyDelta{RequestID: s.id, Seq: seq, Delta: []byte{}, Done: true}
		if err != io.EOF {
			if s.c.readCtx.Err() != nil {
				return // the connection has gone: nobody reads the end
			}
			why := "failed to read the response body: " + httpReadReason(s.ctx, s.timeoutMs, err)
			last.Error = &why
		}
		s.c.notify(protocol.MethodHTTPRequestBodyDelta, last)
		return
	}
}
