package relay

// Peer links and one-hop forwarding between the relays of a cluster.
//
// Every relay of a cluster has the same static key, so a relay reaches a
// peer exactly as a client reaches a relay — Noise IK with the peer's key
// pinned (it is its own) — and the peer knows the initiator for a relay of
// its cluster because it proved it holds that key, and names a member of
// the list in etcd.
//
// Forwarding: for each client that reached it for an executor joined to a
// peer, a relay opens a connection of its own to the peer with
//
//	relay/forward {executorId, relay, client, tokenId} → {executorKey}
//
// in the handshake's payload (answered in message 2), then one Noise
// record holding protocol.RelayForwardReady (so a replayed message 1 is
// answered but never spliced), and from there on both relays splice the
// connection raw — splice(2) where both ends are TCP — to the client on
// one side and the executor on the other. The client's end-to-end Noise
// channel is all that travels: both relays see its ciphertext only, and
// neither spends a cycle of its own cryptography or multiplexing on it
// (one multiplexed link carrying every forwarded client cost ~0.3 ms per
// start-to-exit, the target's whole budget). The client's token was
// redeemed by the first relay; the peer enforces its own bounds (the
// executor's stream limit, draining).
//
// Health: each relay also keeps one link (relay/peer, a multiplexed
// session kept alive by its pings) to every other member, dialled when
// the member appears; /peers shows them.

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"sort"
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

// forwardTimeout bounds one forwarding attempt (the connection to the
// peer and its answer): a peer that died without a reset costs a client
// this long before the next holder is tried.
const forwardTimeout = 3 * time.Second

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
// connection to it. found says whether any relay holds it.
func (c *cluster) forward(ctx context.Context, p protocol.RelayForwardParams) (conn net.Conn, key [32]byte, via string, found bool, err error) {
	p.Relay = c.cfg.RelayID
	for _, rid := range c.holders(ctx, p.ExecutorID) {
		found = true
		c.mu.Lock()
		m, ok := c.members[rid]
		c.mu.Unlock()
		if !ok {
			err = fmt.Errorf("relay %s: %w", rid, errNotMember)
			continue
		}
		actx, cancel := context.WithTimeout(ctx, forwardTimeout)
		conn, res, ferr := relayclient.Forward(actx, fmt.Sprintf(c.url, m.Addr), c.s.cfg.Key, relayclient.Options{HandshakeTimeout: forwardTimeout}, p)
		cancel()
		if ferr != nil {
			err = ferr
			continue
		}
		k, kerr := identity.ParsePublicKey(res.ExecutorKey)
		if kerr != nil {
			conn.Close()
			err = kerr
			continue
		}
		c.forwarded.Add(1)
		c.mu.Lock()
		c.forwards[rid]++
		c.mu.Unlock()
		return conn, [32]byte(k), rid, true, nil
	}
	if found {
		c.forwardFail.Add(1)
	}
	return nil, key, "", found, err
}

// linkLoop keeps a link to every other member (for health): every
// peerRedialAfter it dials the members it has none to, or whose last dial
// failed that long ago, and forgets the links of relays no longer members
// once they are down.
func (c *cluster) linkLoop() {
	t := time.NewTicker(peerRedialAfter)
	defer t.Stop()
	for {
		c.mu.Lock()
		for id, l := range c.peers {
			if _, member := c.members[id]; member {
				continue
			}
			select {
			case <-l.ready:
				if l.err != nil {
					delete(c.peers, id) // a live one goes when it is down (dial)
				}
			default:
			}
		}
		for id, m := range c.members {
			if id == c.cfg.RelayID {
				continue
			}
			if l := c.peers[id]; l != nil {
				select {
				case <-l.ready:
					if l.err == nil || time.Since(l.at) < peerRedialAfter {
						continue
					}
				default:
					continue // being dialled
				}
			}
			l := &peerLink{id: id, addr: m.Addr, ready: make(chan struct{})}
			c.peers[id] = l
			go c.dial(l)
		}
		c.mu.Unlock()
		select {
		case <-c.ctx.Done():
			return
		case <-t.C:
		}
	}
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
	// The link carries the peer's pings only (health); a stream opened on
	// it is refused.
	for {
		st, err := sess.AcceptStream()
		if err != nil {
			return
		}
		st.Close()
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

// forwardAllowed admits a relay/forward (in a handshake's payload): the
// initiator presented the cluster's key and names a member, not this
// relay, and the executor is joined here with room for one more client.
// It takes nothing: serveForward takes the slot once confirmed.
func (s *Server) forwardAllowed(peer [32]byte, p protocol.RelayForwardParams, remote string) (*joined, *protocol.Error) {
	if !s.isClusterKey(peer) {
		return nil, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/forward: only a relay of this cluster may forward")
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.HandshakeTimeout)
	defer cancel()
	if p.Relay == s.cluster.cfg.RelayID || !s.cluster.isMember(ctx, p.Relay) {
		s.log.Warn("forward refused: the relay key was presented, but not by a member of the cluster", zap.String("remote", remote), zap.String("claims", p.Relay))
		return nil, protocol.KindErrorf(protocol.KindRefused, protocol.CodeInvalidRequest, "relay/forward: %q is %v", p.Relay, errNotMember)
	}
	// Nothing is taken yet: this message 1 may be a replay (serveForward
	// takes the slot once the forwarding relay has confirmed).
	j, perr := s.hasSlot(p.ExecutorID, slotHolder{client: p.Client, token: p.TokenID})
	if perr == nil && j == nil {
		perr = protocol.KindErrorf(protocol.KindUnavailable, protocol.CodeNotFound, "relay/forward: executor %s is not joined to relay %s", p.ExecutorID, s.cluster.cfg.RelayID)
	}
	return j, perr
}

// forwardReady is what the forwarding relay's first record holds.
var forwardReady = []byte(protocol.RelayForwardReady)

// serveForward splices a forwarded client to an executor joined here,
// once the forwarding relay's first record has proved it holds the
// handshake's keys.
func (s *Server) serveForward(nc *transport.NoiseConn, hr *handshakeRequest) {
	p := hr.fwd
	if err := s.awaitConfirmation(nc, forwardReady); err != nil {
		s.log.Debug("forward not confirmed", zap.String("executor", p.ExecutorID), zap.String("remote", hr.remote), zap.Error(err))
		return
	}
	h := slotHolder{client: p.Client, token: p.TokenID}
	j, perr := s.takeSlot(p.ExecutorID, h)
	if perr != nil || j != hr.forward {
		if j != nil {
			s.releaseSlot(j, h)
		}
		return // gone or full since message 2: the forwarding relay's client connects again
	}
	defer s.releaseSlot(j, h)
	raw, err := nc.Detach()
	if err != nil {
		return
	}
	defer raw.Conn.Close()
	up, dc, err := s.openTarget(j)
	if err != nil {
		return
	}
	defer s.closeTarget(j, up, dc)
	if ahead := raw.TakePrefix(); len(ahead) > 0 {
		if _, err := up.Write(ahead); err != nil {
			return
		}
	}
	s.log.Info("client connected", zap.String("client", p.Client), zap.String("executor", p.ExecutorID), zap.String("via", p.Relay),
		zap.String("outcome", "spliced"), zap.String("token_id", p.TokenID), zap.Bool("data_conn", dc != nil), zap.Bool("forwarded", true))
	// The holder cuts it too if the token is revoked (the forwarding
	// relay may be gone); it knows the token by id only, admitted at an
	// unknown sequence, so it checks at the next move.
	defer s.trackClient(Token{ID: p.TokenID}, p.Client, func() { raw.Conn.Close(); up.Close() })()
	start := time.Now()
	n := splice(raw.Conn, up)
	s.splicedBytes.Add(n)
	s.log.Info("client disconnected", zap.String("client", p.Client), zap.String("executor", p.ExecutorID), zap.String("via", p.Relay), zap.Uint64("bytes", n), zap.Duration("duration", time.Since(start)))
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
	Forwards  uint64    `json:"forwards"`        // clients forwarded to it
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
		}
		ps.Forwards = c.forwards[id]
		out = append(out, ps)
	}
	c.mu.Unlock()
	sort.Slice(out, func(a, b int) bool { return out[a].ID < out[b].ID })
	return out
}
