package executor

// Read budgets (transport/readbudget.go) of the native transport's
// control streams: what a client's partly read messages may hold.
//
// Per stream, the frame limit NativeConfig.MaxMessageBytes (64 MiB): a
// stream reads one message at a time, and a whole-file fs/writeFile (up
// to Config.MaxFileBytes, 64 MiB by default) or an http/request body
// legitimately takes one message that large, so the limit stays the
// protocol's. Per connection, NativeConfig.ConnectionReadBytes (64 MiB)
// for all its streams: a client sends its requests on one control stream
// in turn, so one message of the largest size at a time is all it needs,
// and a peer that opens 64 streams to fill them all shares those 64 MiB.
// Per server, Config.MessageReadBytes (256 MiB) for every connection.
// The first 64 KiB of every message (transport.FreeFrameBytes) draw on
// none of them, so while a flood holds the budgets every other message —
// every RPC but whole-file writes and file blocks — is still read and
// served. A message that does not fit is dropped as it arrives and its
// request answered with a KindExhausted error; the stream carries on.
//
// So what a flood of partial messages holds is at most MessageReadBytes
// plus 64 KiB per control stream (64 per connection: 4 MiB), whatever the
// number of connections; and nothing once it stops, as a reader keeps no
// buffer between messages.

import (
	"io"

	"github.com/outpost-exec/outpost/transport"
)

// controlReads are a listener's bounds on what its control streams read.
type controlReads struct {
	maxFrame  int   // per stream: a message's largest size
	connBytes int64 // per connection: partly read messages past 64 KiB each
}

func (c NativeConfig) controlReads() controlReads {
	return controlReads{maxFrame: c.MaxMessageBytes, connBytes: c.ConnectionReadBytes}
}

// connectionReads is the budget of one connection's control streams,
// drawing on the server's.
func (s *Server) connectionReads(r controlReads) *transport.ReadBudget {
	return transport.NewReadBudget("connection", r.connBytes, s.reads)
}

// controlConn is the msgpack codec of one control stream.
func controlConn(st io.ReadWriteCloser, r controlReads, conn *transport.ReadBudget) *transport.MsgpackConn {
	mc := transport.NewMsgpackConn(st, r.maxFrame)
	mc.SetReadBudget(conn)
	return mc
}
