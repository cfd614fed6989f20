package relay

// Splice slots: how many clients one joined executor serves through this
// relay at a time, and how many of them one client key or one token may
// hold.
//
// Config.MaxStreamsPerExecutor (1,024) bounds an executor's splices; of
// them one client key holds at most Config.MaxStreamsPerClient (256) and
// one token at most Config.MaxStreamsPerToken (512), so a token holder —
// or a thief of one client's key — who opens connection after connection
// leaves room for everyone else. A forwarded client (cluster) takes its
// slot here, at the relay its executor is joined to, under the client key
// and token id the forwarding relay names. The counts live on the joined
// session; its maps hold one entry per client and token with a slot, so
// they are bounded by MaxStreamsPerExecutor.

import (
	"github.com/outpost-exec/outpost/protocol"
)

// slotHolder is who takes a slot: the client key's fingerprint and the
// token's id (empty for neither).
type slotHolder struct {
	client, token string
}

// slotRefusal says why j has no slot for h, or nil. Call with s.mu held.
func (s *Server) slotRefusal(j *joined, h slotHolder) *protocol.Error {
	switch {
	case j.streams >= s.cfg.MaxStreamsPerExecutor:
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/connect: executor %s has %d connections, the most this relay allows", j.id, s.cfg.MaxStreamsPerExecutor)
	case h.client != "" && j.byClient[h.client] >= s.cfg.MaxStreamsPerClient:
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/connect: this client key holds %d connections to executor %s, the most one key may (Config.MaxStreamsPerClient)", s.cfg.MaxStreamsPerClient, j.id)
	case h.token != "" && j.byToken[h.token] >= s.cfg.MaxStreamsPerToken:
		return protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "relay/connect: token %s holds %d connections to executor %s, the most one token may (Config.MaxStreamsPerToken)", h.token, s.cfg.MaxStreamsPerToken, j.id)
	}
	return nil
}

// hasSlot says, taking nothing, whether executor id joined here has a
// slot for h: the check made in a handshake's message 1, which may be a
// replay. It returns j == nil for an id not joined here.
func (s *Server) hasSlot(id string, h slotHolder) (*joined, *protocol.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: %v; connect again", ErrShuttingDown)
	}
	j := s.executors[id]
	if j == nil {
		return nil, nil
	}
	return j, s.slotRefusal(j, h)
}

// takeSlot takes a splice slot of executor id joined here for h — within
// the executor's, the client's and the token's shares, the relay not
// draining (give it back with releaseSlot). For an id not joined here it
// returns neither (a cluster forwards the client).
func (s *Server) takeSlot(id string, h slotHolder) (*joined, *protocol.Error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.draining {
		return nil, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeInvalidRequest, "relay/connect: %v; connect again", ErrShuttingDown)
	}
	j := s.executors[id]
	if j == nil {
		return nil, nil
	}
	if perr := s.slotRefusal(j, h); perr != nil {
		return nil, perr
	}
	j.streams++
	s.spliced++
	if h.client != "" {
		if j.byClient == nil {
			j.byClient = map[string]int{}
		}
		j.byClient[h.client]++
	}
	if h.token != "" {
		if j.byToken == nil {
			j.byToken = map[string]int{}
		}
		j.byToken[h.token]++
	}
	return j, nil
}

// releaseSlot gives back a slot takeSlot took for h.
func (s *Server) releaseSlot(j *joined, h slotHolder) {
	s.mu.Lock()
	defer s.mu.Unlock()
	j.streams--
	s.spliced--
	decrement(j.byClient, h.client)
	decrement(j.byToken, h.token)
	if s.draining && s.spliced == 0 {
		close(s.drained)
	}
}

// decrement lowers m[k], forgetting it at zero (the maps stay as small
// as the slots held).
func decrement(m map[string]int, k string) {
	if k == "" {
		return
	}
	if m[k] <= 1 {
		delete(m, k)
		return
	}
	m[k]--
}
