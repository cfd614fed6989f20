package relay

// Cluster mode: several relays share one etcd (the token store, see
// store_etcd.go) and one relay key, and know of each other and of every
// joined executor through etcd:
//
//	<prefix>/relays/<relay id>                → {addr}                    a member, under its lease
//	<prefix>/presence/<executor id>/<relay id> → {fp, labels, version, since} under that relay's lease
//
// Each relay holds one lease (ClusterConfig.LeaseTTL, 5 s): its member key
// and the presence of every executor joined to it live under it, so they
// vanish within the TTL of the relay dying (at once when it stops cleanly:
// Close revokes the lease). Every relay watches both prefixes into memory
// (a member map and a presence map), so a relay/connect for an executor
// joined elsewhere costs no etcd round trip: the relay the client reached
// forwards it one hop to a relay holding the executor (peer.go), trying
// the next holder when one fails.
//
// Presence is written by one goroutine that coalesces joins and leaves per
// executor id and commits them in transactions of at most presenceBatch
// operations (etcd refuses more than 128 by default), so a storm of joins
// after a restart costs a few hundred transactions, not one per join.
//
// A relay that loses etcd (its keep-alives go unanswered for the lease's
// TTL) is detached: it reports so on Ready (/readyz answers 503), its
// presence has expired in etcd so no peer forwards to it, and every
// relay/connect it takes fails with kind unavailable, since no token can
// be redeemed without etcd — a relay never decides a redemption alone, so
// a partition cannot split the token database. Spliced streams and joined
// sessions go on untouched. Once etcd answers again the relay takes a new
// lease and writes its member key and all its presence afresh.

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/protocol"
)

// ClusterConfig makes a relay a member of a cluster (Config.Cluster).
type ClusterConfig struct {
	// Client is the etcd client (required); the token store normally
	// shares it. The relay does not close it.
	Client *clientv3.Client
	// Prefix is the etcd key prefix of the cluster (default "/outpost").
	Prefix string
	// RelayID names this relay in the cluster (required, unique; it
	// follows the rules of executor ids).
	RelayID string
	// Advertise is the HOST:PORT executors and peer relays dial to reach
	// this relay (required).
	Advertise string
	// LeaseTTL is the lease of this relay's keys: how long its member
	// entry and its executors' presence outlive it (default
	// DefaultLeaseTTL; whole seconds, at least 2).
	LeaseTTL time.Duration
	// RequestTimeout bounds every etcd request (default 5 s).
	RequestTimeout time.Duration
}

// Defaults of ClusterConfig.
const (
	DefaultClusterPrefix  = "/outpost"
	DefaultLeaseTTL       = 5 * time.Second
	DefaultClusterRequest = 5 * time.Second
)

// presenceBatch bounds the operations of one presence transaction.
const presenceBatch = 100

// ErrDetached: the relay has lost etcd (Ready's error).
var ErrDetached = errors.New("relay: detached from the cluster: etcd does not answer")

func (c ClusterConfig) withDefaults() ClusterConfig {
	c.Prefix = strings.TrimRight(cmp.Or(c.Prefix, DefaultClusterPrefix), "/")
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultClusterRequest)
	return c
}

// Validate reports the first invalid field.
func (c ClusterConfig) Validate() error {
	switch {
	case c.Client == nil:
		return errors.New("relay: Cluster.Client is required (an etcd client)")
	case protocol.CheckExecutorID(c.RelayID) != nil:
		return fmt.Errorf("relay: Cluster.RelayID %q is not a valid id (1..128 bytes, no spaces, '/' or control characters)", c.RelayID)
	case c.Advertise == "":
		return errors.New("relay: Cluster.Advertise is required (the HOST:PORT peers and executors dial)")
	case c.LeaseTTL < 2*time.Second:
		return errors.New("relay: Cluster.LeaseTTL must be at least 2 s")
	case c.RequestTimeout <= 0:
		return errors.New("relay: Cluster.RequestTimeout must be positive")
	}
	return nil
}

// presenceRecord is the value of a presence key.
type presenceRecord struct {
	Fingerprint string            `json:"fp"`
	Labels      map[string]string `json:"labels,omitempty"`
	Version     string            `json:"version,omitempty"`
	Since       int64             `json:"since"` // unix ms
}

// memberRecord is the value of a member key.
type memberRecord struct {
	Addr string `json:"addr"`
}

// cluster is a relay's membership: its lease, the watched maps, the
// presence writer and the peer links (peer.go).
type cluster struct {
	cfg ClusterConfig
	s   *Server
	log *zap.Logger
	url string // outpost://%s#<fp>, the peers' URL pattern

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	wake   chan struct{} // cap 1: presence to write
	first  chan struct{} // closed once the relay first holds a lease
	once   sync.Once

	mu       sync.Mutex
	members  map[string]memberRecord              // by relay id (watched)
	presence map[string]map[string]presenceRecord // executor id → relay id → record (watched)
	pending  map[string]*presenceRecord           // this relay's presence to write; nil: delete
	lease    clientv3.LeaseID                     // 0 while detached
	lastErr  error
	leaving  bool // Leave was called: no more member key
	peers    map[string]*peerLink
	forwards map[string]uint64 // clients forwarded, by peer (at most one entry per relay ever seen)

	presenceOps atomic.Uint64 // presence puts and deletes committed
	presenceTxn atomic.Uint64 // their transactions
	forwarded   atomic.Uint64 // clients forwarded to a peer
	forwardFail atomic.Uint64 // forwards no holder took
	rotate      atomic.Uint64 // where the next forward starts among the holders
}

func newCluster(s *Server, cfg ClusterConfig) *cluster {
	ctx, cancel := context.WithCancel(context.Background())
	c := &cluster{
		cfg: cfg, s: s, log: s.log.With(zap.String("relay", cfg.RelayID)),
		url: "outpost://%s#" + fingerprint([32]byte(s.cfg.Key.Public)),
		ctx: ctx, cancel: cancel, wake: make(chan struct{}, 1), first: make(chan struct{}),
		members: map[string]memberRecord{}, presence: map[string]map[string]presenceRecord{},
		pending: map[string]*presenceRecord{}, peers: map[string]*peerLink{}, forwards: map[string]uint64{},
	}
	c.wg.Add(5)
	go func() { defer c.wg.Done(); c.linkLoop() }()
	go func() { defer c.wg.Done(); c.leaseLoop() }()
	go func() { defer c.wg.Done(); c.writeLoop() }()
	go func() { defer c.wg.Done(); c.watch(c.key("relays/"), c.applyMember, c.resetMembers) }()
	go func() { defer c.wg.Done(); c.watch(c.key("presence/"), c.applyPresence, c.resetPresence) }()
	return c
}

func (c *cluster) key(rest string) string { return c.cfg.Prefix + "/" + rest }

func (c *cluster) presenceKey(id string) string {
	return c.key("presence/" + id + "/" + c.cfg.RelayID)
}

func (c *cluster) request() (context.Context, context.CancelFunc) {
	return context.WithTimeout(c.ctx, c.cfg.RequestTimeout)
}

// leaseLoop holds the relay's lease: grant, register, keep alive; when
// the keep-alives stop (etcd lost for the TTL), detach and start over.
func (c *cluster) leaseLoop() {
	bo := backoff.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second}
	for c.ctx.Err() == nil {
		lease, err := c.attach()
		if err != nil {
			c.setDetached(err)
			if bo.Wait(c.ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
		ch, err := c.cfg.Client.KeepAlive(c.ctx, lease)
		if err != nil {
			c.setDetached(err)
			continue
		}
		for range ch {
		}
		if c.ctx.Err() != nil {
			return
		}
		c.setDetached(errors.New("the lease's keep-alives went unanswered"))
		c.log.Warn("lost etcd: detached from the cluster until it answers again (new connects fail as unavailable; spliced streams go on)")
	}
}

// attach takes a new lease, writes the member key under it and queues the
// presence of every executor joined here.
func (c *cluster) attach() (clientv3.LeaseID, error) {
	ctx, cancel := c.request()
	defer cancel()
	g, err := c.cfg.Client.Grant(ctx, int64(c.cfg.LeaseTTL/time.Second))
	if err != nil {
		return 0, err
	}
	c.mu.Lock()
	leaving := c.leaving
	c.mu.Unlock()
	if !leaving {
		v, _ := json.Marshal(memberRecord{Addr: c.cfg.Advertise})
		if _, err := c.cfg.Client.Put(ctx, c.key("relays/"+c.cfg.RelayID), string(v), clientv3.WithLease(g.ID)); err != nil {
			return 0, err
		}
	}
	c.mu.Lock()
	left := !leaving && c.leaving
	c.mu.Unlock()
	if left {
		// A drain's leave ran while the entry was written: take it out again.
		c.cfg.Client.Delete(ctx, c.key("relays/"+c.cfg.RelayID))
	}
	// Everything joined here is written again under the new lease.
	c.s.mu.Lock()
	recs := make(map[string]presenceRecord, len(c.s.executors))
	for id, j := range c.s.executors {
		recs[id] = j.presence()
	}
	c.s.mu.Unlock()
	c.mu.Lock()
	c.lease, c.lastErr = g.ID, nil
	for id, r := range recs {
		if _, queued := c.pending[id]; !queued {
			c.pending[id] = &r
		}
	}
	c.mu.Unlock()
	c.poke()
	c.once.Do(func() { close(c.first) })
	c.log.Info("attached to the cluster", zap.String("advertise", c.cfg.Advertise), zap.Int("executors", len(recs)))
	return g.ID, nil
}

func (c *cluster) setDetached(err error) {
	c.mu.Lock()
	c.lease, c.lastErr = 0, err
	c.mu.Unlock()
}

func (c *cluster) poke() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// joined and left queue an executor's presence here (the last one per id
// wins; the queue is bounded by the executors joined, one entry each).
func (c *cluster) joined(id string, r presenceRecord) {
	c.mu.Lock()
	c.pending[id] = &r
	c.mu.Unlock()
	c.poke()
}

func (c *cluster) left(id string) {
	c.mu.Lock()
	c.pending[id] = nil
	c.mu.Unlock()
	c.poke()
}

// writeLoop commits queued presence, presenceBatch operations per
// transaction, while the relay holds a lease.
func (c *cluster) writeLoop() {
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 2 * time.Second}
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.wake:
		}
		for {
			c.mu.Lock()
			lease := c.lease
			if lease == 0 || len(c.pending) == 0 {
				c.mu.Unlock()
				break
			}
			batch := make(map[string]*presenceRecord, min(len(c.pending), presenceBatch))
			for id, r := range c.pending {
				batch[id] = r
				delete(c.pending, id)
				if len(batch) == presenceBatch {
					break
				}
			}
			c.mu.Unlock()
			if err := c.commit(lease, batch); err != nil {
				c.mu.Lock()
				for id, r := range batch {
					if _, newer := c.pending[id]; !newer {
						c.pending[id] = r
					}
				}
				c.mu.Unlock()
				c.log.Debug("presence not written; retrying", zap.Error(err))
				if bo.Wait(c.ctx) != nil {
					return
				}
				continue
			}
			bo.Reset()
		}
	}
}

func (c *cluster) commit(lease clientv3.LeaseID, batch map[string]*presenceRecord) error {
	ops := make([]clientv3.Op, 0, len(batch))
	for id, r := range batch {
		if r == nil {
			ops = append(ops, clientv3.OpDelete(c.presenceKey(id)))
			continue
		}
		v, err := json.Marshal(r)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(c.presenceKey(id), string(v), clientv3.WithLease(lease)))
	}
	ctx, cancel := c.request()
	defer cancel()
	if _, err := c.cfg.Client.Txn(ctx).Then(ops...).Commit(); err != nil {
		return err
	}
	c.presenceOps.Add(uint64(len(ops)))
	c.presenceTxn.Add(1)
	return nil
}

// watch mirrors the keys under prefix into memory: a snapshot (reset),
// then the changes from its revision on (apply); any trouble — etcd lost,
// the revision compacted — starts over from a new snapshot.
func (c *cluster) watch(prefix string, apply func(key string, val []byte, del bool), reset func()) {
	bo := backoff.Backoff{Initial: 200 * time.Millisecond, Max: 2 * time.Second}
	for c.ctx.Err() == nil {
		ctx, cancel := c.request()
		resp, err := c.cfg.Client.Get(ctx, prefix, clientv3.WithPrefix())
		cancel()
		if err != nil {
			if bo.Wait(c.ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
		c.mu.Lock()
		reset()
		c.mu.Unlock()
		for _, kv := range resp.Kvs {
			apply(strings.TrimPrefix(string(kv.Key), prefix), kv.Value, false)
		}
		wctx, wcancel := context.WithCancel(clientv3.WithRequireLeader(c.ctx))
		for wr := range c.cfg.Client.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1)) {
			if wr.Err() != nil || wr.Canceled {
				break
			}
			for _, ev := range wr.Events {
				apply(strings.TrimPrefix(string(ev.Kv.Key), prefix), ev.Kv.Value, ev.Type == clientv3.EventTypeDelete)
			}
		}
		wcancel()
		if bo.Wait(c.ctx) != nil {
			return
		}
	}
}

// resetMembers and resetPresence run under c.mu.
func (c *cluster) resetMembers()  { clear(c.members) }
func (c *cluster) resetPresence() { clear(c.presence) }

func (c *cluster) applyMember(id string, val []byte, del bool) {
	if protocol.CheckExecutorID(id) != nil {
		return // not a key a relay writes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if del {
		delete(c.members, id)
		return
	}
	var m memberRecord
	if json.Unmarshal(val, &m) != nil || m.Addr == "" {
		return
	}
	c.members[id] = m
}

func (c *cluster) applyPresence(rest string, val []byte, del bool) {
	execID, relayID, ok := strings.Cut(rest, "/")
	if !ok || protocol.CheckExecutorID(execID) != nil || protocol.CheckExecutorID(relayID) != nil {
		return // not a key a relay writes
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if del {
		if m := c.presence[execID]; m != nil {
			delete(m, relayID)
			if len(m) == 0 {
				delete(c.presence, execID)
			}
		}
		return
	}
	var r presenceRecord
	if json.Unmarshal(val, &r) != nil {
		return
	}
	m := c.presence[execID]
	if m == nil {
		m = map[string]presenceRecord{}
		c.presence[execID] = m
	}
	m[relayID] = r
}

// presentKey is the executor key another relay's presence record of id
// names (false when the watched presence has none, or it does not parse).
func (c *cluster) presentKey(id string) ([32]byte, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for rid, r := range c.presence[id] {
		if rid == c.cfg.RelayID {
			continue
		}
		if k, err := identity.ParsePublicKey(r.Fingerprint); err == nil {
			return [32]byte(k), true
		}
	}
	return [32]byte{}, false
}

// holders are the other relays an executor is joined to, by the watched
// presence; when the map knows none (the watch may lag a join by a
// moment) etcd is asked once.
func (c *cluster) holders(ctx context.Context, id string) []string {
	c.mu.Lock()
	var out []string
	for rid := range c.presence[id] {
		if rid != c.cfg.RelayID {
			out = append(out, rid)
		}
	}
	c.mu.Unlock()
	if len(out) == 0 {
		ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
		resp, err := c.cfg.Client.Get(ctx, c.key("presence/"+id+"/"), clientv3.WithPrefix(), clientv3.WithKeysOnly())
		cancel()
		if err == nil {
			for _, kv := range resp.Kvs {
				if rid := strings.TrimPrefix(string(kv.Key), c.key("presence/"+id+"/")); rid != c.cfg.RelayID {
					out = append(out, rid)
				}
			}
		}
	}
	sort.Strings(out)
	// Spread clients over the holders: start at a rotating one (every
	// call moves it, so a hung holder is not first for every client).
	if n := len(out); n > 1 {
		k := int(c.rotate.Add(1) % uint64(n))
		out = append(out[k:], out[:k]...)
	}
	return out
}

// info is what a join answer says of the cluster: this relay and the
// live members (at most protocol.MaxRelayMembers).
func (c *cluster) info() *protocol.RelayCluster {
	c.mu.Lock()
	defer c.mu.Unlock()
	rc := &protocol.RelayCluster{Relay: c.cfg.RelayID, Members: make([]protocol.RelayMember, 0, len(c.members)+1)}
	self := false
	for id, m := range c.members {
		if id == c.cfg.RelayID {
			// A leaving relay is no longer one to go to (its own delete may
			// not have come back through the watch yet).
			if c.leaving {
				continue
			}
			self = true
		}
		rc.Members = append(rc.Members, protocol.RelayMember{ID: id, Addr: m.Addr})
	}
	if !self && !c.leaving {
		rc.Members = append(rc.Members, protocol.RelayMember{ID: c.cfg.RelayID, Addr: c.cfg.Advertise})
	}
	sort.Slice(rc.Members, func(a, b int) bool { return rc.Members[a].ID < rc.Members[b].ID })
	if len(rc.Members) > protocol.MaxRelayMembers {
		rc.Members = rc.Members[:protocol.MaxRelayMembers]
	}
	return rc
}

// listing is every executor of the cluster by the watched presence, with
// the relays each is joined to.
func (c *cluster) listing() map[string]protocol.RelayExecutor {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]protocol.RelayExecutor, len(c.presence))
	for id, m := range c.presence {
		e := protocol.RelayExecutor{ID: id}
		for rid, r := range m {
			if e.Fingerprint == "" || r.Since < e.ConnectedSince {
				e.Labels, e.Fingerprint, e.Version, e.ConnectedSince = r.Labels, r.Fingerprint, r.Version, r.Since
			}
			e.Relays = append(e.Relays, rid)
		}
		sort.Strings(e.Relays)
		out[id] = e
	}
	return out
}

// ready is nil while the relay holds its lease.
func (c *cluster) ready() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.lease != 0 {
		return nil
	}
	if c.lastErr != nil {
		return fmt.Errorf("%w: %v", ErrDetached, c.lastErr)
	}
	return ErrDetached
}

// leave takes the member key out of etcd, so that join answers no longer
// send executors here (a drain); the presence stays until Close.
func (c *cluster) leave(ctx context.Context) {
	c.mu.Lock()
	c.leaving = true
	lease := c.lease
	c.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	// Only our own key: another relay with this id may have written it.
	k := c.key("relays/" + c.cfg.RelayID)
	if _, err := c.cfg.Client.Txn(ctx).If(clientv3.Compare(clientv3.LeaseValue(k), "=", lease)).Then(clientv3.OpDelete(k)).Commit(); err != nil {
		c.log.Warn("could not leave the member list", zap.Error(err))
	}
}

// close stops the goroutines, revokes the lease (the member key and this
// relay's presence go at once) and closes the peer links.
func (c *cluster) close() {
	c.cancel()
	c.wg.Wait()
	c.mu.Lock()
	lease := c.lease
	c.lease = 0
	peers := make([]*peerLink, 0, len(c.peers))
	for _, p := range c.peers {
		peers = append(peers, p)
	}
	c.mu.Unlock()
	if lease != 0 {
		ctx, cancel := context.WithTimeout(context.Background(), c.cfg.RequestTimeout)
		c.cfg.Client.Revoke(ctx, lease)
		cancel()
	}
	for _, p := range peers {
		p.close()
	}
}
