package relay

// Peer links and one-hop forwarding between the relays of a cluster.
//
// Every relay of a cluster has the same static key, so a relay dials a
// peer exactly as a client dials a relay — Noise IK with the peer's key
// pinned (it is its own) — and the peer knows the initiator for a relay of
// its cluster because the initiator proved it holds that key; the first
// request, relay/peer, names the initiator, which must be in the member
// list in etcd. The link is then one multiplexed session: per forwarded
// client, the relay the client reached opens a stream and sends
//
//	relay/forward {executorId, client, tokenId} → {executorKey}
//
// and the peer splices the rest of the stream to the executor as it would
// a client of its own (a data connection or a stream on the executor's
// session). The client's end-to-end Noise channel with the executor runs
// inside, untouched: both relays see its ciphertext only. The client's
// token was redeemed by the first relay; the peer enforces its own bounds
// (the executor's stream limit, draining).
//
// One link per pair and direction, dialled on first need and kept while it
// answers (the mux keep-alive); a failed dial is not retried for
// peerRedialAfter, so a dead peer costs its forwards one failed attempt
// each, not a dial each. Links are bounded by the members (one per
// member), forwarded streams by maxForwardsPerLink per link.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sort"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// peerRedialAfter is how long a failed dial to a peer is remembered.
const peerRedialAfter = time.Second

// forwardTimeout bounds one forwarding attempt (the link's dial and the
// peer's answer): a peer that died without its link noticing yet costs a
// client this long before the next holder is tried.
const forwardTimeout = 3 * time.Second

// maxForwardsPerLink bounds the streams a peer may have forwarded to this
// relay at once over one link (two goroutines each while spliced).
const maxForwardsPerLink = 16384

// errNotMember: a peer link's dialler or target is not in the member list.
var errNotMember = errors.New("not a member of the cluster")

// peerLink is this relay's link to one peer: dialled once (ready closes
// when the dial has ended, with conn or err).
type peerLink struct {
	id    string
	addr  string
	ready chan struct{}
	conn  *relayclient.Conn
	err   error
	at    time.Time
	since time.Time

	forwards atomic.Uint64
}

func (l *peerLink) close() {
	select {
	case <-l.ready:
		if l.conn != nil {
			l.conn.Close()
		}
	default:
	}
}

// link returns the live link to peer id, dialling it if there is none.
func (c *cluster) link(ctx context.Context, id string) (*peerLink, error) {
	c.mu.Lock()
	if l := c.peers[id]; l != nil {
		c.mu.Unlock()
		select {
		case <-l.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if l.err != nil {
			if time.Since(l.at) < peerRedialAfter {
				return nil, l.err
			}
		} else {
			select {
			case <-l.conn.Done():
			default:
				return l, nil
			}
		}
		c.mu.Lock()
		if c.peers[id] == l {
			delete(c.peers, id)
		}
		if nl := c.peers[id]; nl != nil {
			// Another caller is dialling afresh: wait for it.
			c.mu.Unlock()
			return c.link(ctx, id)
		}
	}
	m, ok := c.members[id]
	if !ok || c.ctx.Err() != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("relay %s: %w", id, errNotMember)
	}
	l := &peerLink{id: id, addr: m.Addr, ready: make(chan struct{})}
	c.peers[id] = l
	c.mu.Unlock()
	// The dial is the link's, not the caller's (a caller that gives up
	// must not leave a half-made link to the others), but the caller
	// waits for it no longer than its ctx: forwardTimeout bounds a try.
	go c.dial(l)
	select {
	case <-l.ready:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	if l.err != nil {
		return nil, l.err
	}
	return l, nil
}

// dial makes link l (closing l.ready) and, once it is up, removes it
// from the peers when it goes down.
func (c *cluster) dial(l *peerLink) {
	id := l.id
	dctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.HandshakeTimeout)
	defer cancel()
	conn, err := relayclient.Dial(dctx, fmt.Sprintf(c.url, l.addr), c.s.cfg.Key, relayclient.Options{Mux: c.s.cfg.Mux, HandshakeTimeout: c.s.cfg.HandshakeTimeout})
	if err == nil {
		if err = conn.Call(dctx, protocol.MethodRelayPeer, protocol.RelayPeerParams{Relay: c.cfg.RelayID}, nil); err != nil {
			conn.Close()
			conn = nil
		}
	}
	if err == nil && c.ctx.Err() != nil {
		// close ran meanwhile: no link may outlive it.
		conn.Close()
		conn, err = nil, c.ctx.Err()
	}
	l.conn, l.err, l.at, l.since = conn, err, time.Now(), time.Now()
	close(l.ready)
	if err != nil {
		c.log.Info("peer link failed", zap.String("peer", id), zap.String("addr", l.addr), zap.Error(err))
		return
	}
	c.log.Info("peer link up", zap.String("peer", id), zap.String("addr", l.addr))
	<-conn.Done()
	c.mu.Lock()
	if c.peers[id] == l {
		delete(c.peers, id)
	}
	c.mu.Unlock()
	c.log.Info("peer link down", zap.String("peer", id))
}

// forward asks the relays holding executor id, one after the other, for a
// stream to it. found says whether any relay holds it.
func (c *cluster) forward(ctx context.Context, p protocol.RelayForwardParams) (st net.Conn, key [32]byte, via string, found bool, err error) {
	for _, rid := range c.holders(ctx, p.ExecutorID) {
		found = true
		actx, cancel := context.WithTimeout(ctx, forwardTimeout)
		l, lerr := c.link(actx, rid)
		if lerr != nil {
			cancel()
			err = lerr
			continue
		}
		st, res, ferr := l.conn.Forward(actx, p)
		cancel()
		if ferr != nil {
			err = ferr
			continue
		}
		k, kerr := identity.ParsePublicKey(res.ExecutorKey)
		if kerr != nil {
			st.Close()
			err = kerr
			continue
		}
		l.forwards.Add(1)
		c.forwarded.Add(1)
		return st, [32]byte(k), rid, true, nil
	}
	if found {
		c.forwardFail.Add(1)
	}
	return nil, key, "", found, err
}

// servePeer serves a peer link: the initiator proved it holds the
// cluster's key; relay/peer must name a member. Each stream it opens then
// carries one relay/forward.
func (s *Server) servePeer(ctx context.Context, sess *transport.MuxSession, mc *transport.MsgpackConn, m *transport.Message, remote string) {
	c := s.cluster
	var p protocol.RelayPeerParams
	if m.Params == nil || m.Params.Decode(&p) != nil || !c.isMember(ctx, p.Relay) || p.Relay == c.cfg.RelayID {
		s.log.Warn("peer link refused: the relay key was presented, but not by a member of the cluster", zap.String("remote", remote), zap.String("claims", p.Relay))
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/peer: %q is %v", p.Relay, errNotMember))
		return
	}
	if err := mc.WriteResult(ctx, m.ID, protocol.Empty{}); err != nil {
		return
	}
	s.log.Info("peer link accepted", zap.String("peer", p.Relay), zap.String("remote", remote))
	slots := make(chan struct{}, maxForwardsPerLink)
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		select {
		case slots <- struct{}{}:
		default:
			st.Close()
			continue
		}
		go func() {
			defer func() { <-slots }()
			s.serveForward(ctx, st, p.Relay)
		}()
	}
}

// isMember says whether relay id is in the member list: the watched one,
// or etcd's when the watch has not seen it yet.
func (c *cluster) isMember(ctx context.Context, id string) bool {
	c.mu.Lock()
	_, ok := c.members[id]
	c.mu.Unlock()
	if ok || protocol.CheckExecutorID(id) != nil {
		return ok
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	resp, err := c.cfg.Client.Get(ctx, c.key("relays/"+id), clientv3.WithKeysOnly())
	return err == nil && len(resp.Kvs) == 1
}

// serveForward splices one forwarded client to an executor joined here.
func (s *Server) serveForward(ctx context.Context, st net.Conn, from string) {
	defer st.Close()
	mc := transport.NewMsgpackConn(st, maxControlFrame)
	st.SetReadDeadline(time.Now().Add(s.cfg.HandshakeTimeout))
	m, err := mc.ReadMessage(ctx)
	st.SetReadDeadline(time.Time{})
	if err != nil {
		return
	}
	var p protocol.RelayForwardParams
	if m.Kind != transport.KindRequest || m.Method != protocol.MethodRelayForward || m.Params == nil || m.Params.Decode(&p) != nil || protocol.CheckExecutorID(p.ExecutorID) != nil {
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidRequest, "relay/forward: a valid executorId is required"))
		return
	}
	j, perr := s.takeSlot(p.ExecutorID)
	if perr == nil && j == nil {
		perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/forward: executor %s is not joined to relay %s", p.ExecutorID, s.cluster.cfg.RelayID)
	}
	if perr != nil {
		mc.WriteError(ctx, m.ID, perr)
		return
	}
	defer s.releaseSlot(j)
	up, dc, err := s.openTarget(j)
	if err != nil {
		mc.WriteError(ctx, m.ID, protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/forward: executor %s is offline", p.ExecutorID))
		return
	}
	defer s.closeTarget(j, up, dc)
	if err := mc.WriteResult(ctx, m.ID, protocol.RelayConnectResult{ExecutorKey: fingerprint(j.key)}); err != nil {
		return
	}
	s.log.Info("client connected", zap.String("client", p.Client), zap.String("executor", p.ExecutorID), zap.String("via", from),
		zap.String("outcome", "spliced"), zap.String("token_id", p.TokenID), zap.Bool("data_conn", dc != nil), zap.Bool("forwarded", true))
	start := time.Now()
	n := splice(st, up)
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", p.Client), zap.String("executor", p.ExecutorID), zap.String("via", from), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
}

// isClusterKey says whether a Noise peer presented the relay's own key:
// in a cluster, a peer relay.
func (s *Server) isClusterKey(peer [32]byte) bool {
	return s.cluster != nil && subtle.ConstantTimeCompare(peer[:], s.cfg.Key.Public) == 1
}

// PeerStatus is one peer of a clustered relay, for operators
// (`--admin-listen` /peers).
type PeerStatus struct {
	ID        string    `json:"id"`
	Addr      string    `json:"addr"`
	Linked    bool      `json:"linked"`          // a link from this relay is up
	Since     time.Time `json:"since,omitzero"`  // when it came up
	LastError string    `json:"error,omitempty"` // the last failed dial's
	Forwards  uint64    `json:"forwards"`        // clients forwarded over it
}

// Peers lists the cluster's other members and this relay's links to
// them (nil for a single relay).
func (s *Server) Peers() []PeerStatus {
	c := s.cluster
	if c == nil {
		return nil
	}
	c.mu.Lock()
	out := make([]PeerStatus, 0, len(c.members))
	for id, m := range c.members {
		if id == c.cfg.RelayID {
			continue
		}
		ps := PeerStatus{ID: id, Addr: m.Addr}
		if l := c.peers[id]; l != nil {
			select {
			case <-l.ready:
				if l.err != nil {
					ps.LastError = l.err.Error()
				} else {
					ps.Linked, ps.Since = true, l.since
				}
			default:
			}
			ps.Forwards = l.forwards.Load()
		}
		out = append(out, ps)
	}
	c.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}
