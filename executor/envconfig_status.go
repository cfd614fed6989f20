package executor

import (
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// environmentStatus answers environment/status. codex 0.171 defines one
// status, "ready"; its client takes any error as "disconnected" and shows
// the message. So an executor that is shutting down answers with an
// error (KindUnavailable) rather than a status codex cannot decode. The
// lifecycle checks in request() refuse the call before initialized.
func (c *serverConn) environmentStatus(*transport.Message) (any, error) {
	c.srv.mu.Lock()
	closing := c.srv.closing
	c.srv.mu.Unlock()
	if closing {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "%v", ErrShuttingDown)
	}
	return protocol.EnvironmentStatus{Status: protocol.EnvironmentStatusReady}, nil
}
