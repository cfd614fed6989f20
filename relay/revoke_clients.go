package relay

// Revoking a client token cuts the connections admitted on it.
//
// Store.Revoke moves the store's revocation sequence, which the relay
// polls every Config.RevocationPoll (1 s) while it has executors joined or
// clients spliced (watchRevocations). When it moves past the sequence a
// live connection's token was admitted at (Token.RevocationSeq, read in
// the redeeming transaction, so a revocation that races the admission is
// never missed), the relay asks the store about those tokens
// (RevokedTokens) and closes the connections of the revoked ones: the
// client's end-to-end session breaks, and its resume is refused like any
// new connect. In a cluster the relay a client entered by and the relay
// its executor is joined to both hold the connection, and both poll the
// one store, so either cuts it within about a second.
//
// Bound: one entry per spliced connection (Config.MaxConnections).

import (
	"go.uber.org/zap"
)

// liveClient is a spliced client connection, as the revocation watch
// sees it.
type liveClient struct {
	token  string // the token's public id
	seq    uint64 // the revocation sequence it was admitted at
	client string // the client key's fingerprint, for the log
	cut    func() // closes both ends of the splice
}

// trackClient registers a spliced connection admitted on tok, to be cut
// if tok is revoked; call the returned func when the splice ends.
func (s *Server) trackClient(tok Token, client string, cut func()) (untrack func()) {
	if tok.ID == "" {
		return func() {} // a forward from a relay that names no token
	}
	lc := &liveClient{token: tok.ID, seq: tok.RevocationSeq, client: client, cut: cut}
	s.mu.Lock()
	if s.live == nil {
		s.live = map[*liveClient]struct{}{}
	}
	s.live[lc] = struct{}{}
	s.startWatchLocked()
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.live, lc)
		s.mu.Unlock()
	}
}

// startWatchLocked starts watchRevocations unless it runs. Call with s.mu
// held.
func (s *Server) startWatchLocked() {
	if !s.watching {
		s.watching = true
		go s.watchRevocations()
	}
}

// checkClientRevocations cuts the live connections whose tokens were
// revoked after they were admitted (seq is the store's sequence now).
func (s *Server) checkClientRevocations(seq uint64) error {
	s.mu.Lock()
	var ids []string
	asked := map[string]bool{}
	for lc := range s.live {
		if lc.seq < seq && !asked[lc.token] {
			asked[lc.token] = true
			ids = append(ids, lc.token)
		}
	}
	s.mu.Unlock()
	if len(ids) == 0 {
		return nil
	}
	revoked, seq, err := s.cfg.Tokens.RevokedTokens(ids)
	if err != nil {
		return err
	}
	var cut []*liveClient
	s.mu.Lock()
	for lc := range s.live {
		switch {
		case !asked[lc.token]:
		case revoked[lc.token]:
			delete(s.live, lc)
			cut = append(cut, lc)
		case lc.seq < seq:
			lc.seq = seq
		}
	}
	s.mu.Unlock()
	for _, lc := range cut {
		s.revokedClients.Add(1)
		s.log.Warn("client token revoked: connection closed", zap.String("token_id", lc.token), zap.String("client", lc.client))
		lc.cut()
	}
	return nil
}
