package executor

// Sessions on several relays of a cluster. A relay of a cluster names
// itself and the cluster's live members in its answer to relay/join; the
// executor then keeps JoinConfig.RelayConnections sessions ("slots"),
// each on another member, so that losing a relay loses no reachability:
// clients reaching any relay are forwarded to one the executor is joined
// to, and the slot that lost its relay moves to a member no other slot
// holds. A relay takes one live session per executor id, so two slots
// must never target the same relay: once members are known every slot
// dials a member's own address, never the configured URL (a load
// balancer could land it on a relay another slot holds).

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/backoff"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// Bounds of JoinConfig.RelayConnections.
const (
	// DefaultClusterRelayConnections is the automatic count (0) once the
	// relay's answer names a cluster: two sessions, so one relay's loss
	// or drain leaves the executor joined while the slot moves.
	DefaultClusterRelayConnections = 2
	// MaxRelayConnections bounds the sessions an executor keeps: each
	// holds a connection, a data pool and a relay's directory entry.
	MaxRelayConnections = 8
)

// maxRelayIDLen bounds a relay id taken from a join answer: ids are map
// keys and log fields.
const maxRelayIDLen = 256

// joinTarget is where a slot dials: a member of the cluster (id set), or
// the configured URL (configured).
type joinTarget struct {
	id         string
	configured bool
	addr       string
	url        string
}

// slotState is one slot's share of the roster. target is the member it
// has reserved or is joined to ("" when none or not known yet): no
// other slot may pick it.
type slotState struct {
	active     bool
	target     string
	configured bool // it dials (or joined through) the configured URL
	joined     bool
}

// roster is what the slots of one Join share: the members last named,
// which slot holds which, and the first error that ends them all.
type roster struct {
	s          *Server
	resp       *responder
	cfg        JoinConfig
	configured joinTarget
	fp         string // the relay key's fingerprint, the same on every member
	// wsOnly: the configured URL is outpost+ws:// and the count
	// automatic. Members are named by the HOST:PORT of their outpost://
	// listeners, which the HTTP-only network such a URL is for may not
	// reach: the executor keeps its one session on the configured URL
	// unless RelayConnections asks for members.
	wsOnly bool
	rnd    func(n int) int

	ctx    context.Context // the slots'; cancel ends them all
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu        sync.Mutex
	clustered bool                   // a join answer named a cluster
	members   []protocol.RelayMember // the last answer's, at most protocol.MaxRelayMembers
	failed    map[string]bool        // member id → its last attempt ended before a join
	slots     [MaxRelayConnections]slotState
	running   int
	err       error // the refusal that ended every slot
}

func newRoster(s *Server, resp *responder, cfg JoinConfig, u transport.URL) *roster {
	return &roster{s: s, resp: resp, cfg: cfg,
		configured: joinTarget{configured: true, addr: u.Addr, url: cfg.RelayURL},
		fp:         identity.PublicKey(u.Key).Fingerprint(),
		wsOnly:     u.Scheme == transport.SchemeRelayWS && cfg.RelayConnections == 0,
		rnd:        rand.IntN,
		failed:     make(map[string]bool)}
}

// run starts slot 0 on the configured URL and waits for every slot to
// end: when ctx ends (its error) or a refusal ends them all (that one).
func (r *roster) run(ctx context.Context) error {
	r.ctx, r.cancel = context.WithCancel(ctx)
	defer r.cancel()
	r.mu.Lock()
	r.startLocked(0)
	r.mu.Unlock()
	r.wg.Wait()
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		return r.err
	}
	return ctx.Err()
}

// end records err as what ended Join and stops every slot.
func (r *roster) end(err error) {
	r.mu.Lock()
	if r.err == nil {
		r.err = err
	}
	r.mu.Unlock()
	r.cancel()
}

// want is how many slots should run: K (automatic: 1, or 2 once a
// cluster is known), at most one per known member.
func (r *roster) want() int {
	k := r.cfg.RelayConnections
	if k == 0 {
		k = 1
		if r.clustered {
			k = DefaultClusterRelayConnections
		}
	}
	k = min(k, MaxRelayConnections)
	if len(r.members) > 0 {
		k = min(k, len(r.members))
	}
	return k
}

// startLocked starts slot i. The caller holds r.mu.
func (r *roster) startLocked(i int) {
	r.slots[i] = slotState{active: true}
	r.running++
	r.wg.Add(1)
	go r.runSlot(i)
}

// spawnLocked starts as many slots as want allows and free members
// exist for. The caller holds r.mu, from a running slot (so r.wg is
// above zero while run waits on it).
func (r *roster) spawnLocked() {
	if r.ctx.Err() != nil {
		return
	}
	n := min(r.want()-r.running, len(r.members)-len(r.takenLocked(-1)))
	for i := 0; i < len(r.slots) && n > 0; i++ {
		if !r.slots[i].active {
			r.startLocked(i)
			n--
		}
	}
}

// takenLocked is the set of members held by slots other than slot.
func (r *roster) takenLocked(slot int) map[string]bool {
	taken := make(map[string]bool, len(r.slots))
	for i, st := range r.slots {
		if i != slot && st.active && st.target != "" {
			taken[st.target] = true
		}
	}
	return taken
}

// pick reserves the target of slot's next attempt; left is the relay it
// last left (or failed to reach), leftConfigured whether that attempt
// was through the configured URL. false: every member is held by another
// slot, so this slot is surplus (the cluster shrank below K) and ends —
// it is never the last one running, since a lone slot holds no member
// another could.
func (r *roster) pick(slot int, left string, leftConfigured bool) (joinTarget, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.slots[slot]
	st.target, st.configured, st.joined = "", false, false
	if len(r.members) == 0 {
		st.configured = true
		return r.configured, true
	}
	if r.movedLocked(slot) && !leftConfigured {
		st.configured = true
		r.s.log.Info("no known relay of the cluster answered; trying the configured URL", zap.Int("slot", slot), zap.String("relay", r.configured.addr))
		return r.configured, true
	}
	m, ok := pickMember(r.members, r.takenLocked(slot), left, r.failed, r.rnd)
	if !ok {
		// Surplus. The slot stays active, holding nothing, until its
		// goroutine has ended (stop): its index is not reused before.
		if r.running > 1 {
			return joinTarget{}, false
		}
		st.configured = true
		return r.configured, true
	}
	st.target = m.ID
	return joinTarget{id: m.ID, addr: m.Addr, url: memberURL(m.Addr, r.fp)}, true
}

// movedLocked says whether the cluster seems to have moved away from the
// members known: no slot is joined or dialling anywhere, and the last
// attempt at every member failed before its join. Members are learnt
// from join answers only, so if all of them are gone for good (relays
// replaced at new addresses) only the configured URL can find the new
// ones; with nothing else in flight, it cannot land on a relay another
// slot holds.
func (r *roster) movedLocked(slot int) bool {
	for i, st := range r.slots {
		if i != slot && st.active && (st.joined || st.target != "" || st.configured) {
			return false
		}
	}
	for _, m := range r.members {
		if !r.failed[m.ID] {
			return false
		}
	}
	return true
}

// pickMember chooses a member for a slot: one not in taken (held by
// other slots), not left (the relay the slot just left) unless it is the
// only one free, preferring members whose last attempt did not fail; at
// random among those, so that a cluster's executors spread over its
// relays instead of all crowding the first. false when every member is
// taken.
func pickMember(members []protocol.RelayMember, taken map[string]bool, left string, failed map[string]bool, rnd func(n int) int) (protocol.RelayMember, bool) {
	var free []protocol.RelayMember
	for _, m := range members {
		if !taken[m.ID] {
			free = append(free, m)
		}
	}
	if len(free) == 0 {
		return protocol.RelayMember{}, false
	}
	if len(free) > 1 {
		others := free[:0:0]
		for _, m := range free {
			if m.ID != left {
				others = append(others, m)
			}
		}
		if len(others) > 0 {
			free = others
		}
	}
	var healthy []protocol.RelayMember
	for _, m := range free {
		if !failed[m.ID] {
			healthy = append(healthy, m)
		}
	}
	if len(healthy) > 0 {
		free = healthy
	}
	return free[rnd(len(free))], true
}

// memberURL is the URL a member is dialled at: its address with the
// cluster's fingerprint (every relay of a cluster holds the same key).
func memberURL(addr, fp string) string {
	return transport.SchemeRelay + "://" + addr + "#" + fp
}

// validMembers keeps the members of a join answer that can be dialled:
// at most protocol.MaxRelayMembers, with an id and an address that makes
// a URL, each id and address once (two entries for one relay would let
// two slots target it).
func validMembers(in []protocol.RelayMember, fp string) []protocol.RelayMember {
	out := make([]protocol.RelayMember, 0, min(len(in), protocol.MaxRelayMembers))
	ids, addrs := make(map[string]bool), make(map[string]bool)
	for _, m := range in {
		if len(out) == protocol.MaxRelayMembers {
			break
		}
		if m.ID == "" || len(m.ID) > maxRelayIDLen || ids[m.ID] || addrs[m.Addr] {
			continue
		}
		if _, err := transport.ParseURL(memberURL(m.Addr, fp), transport.SchemeRelay); err != nil {
			continue
		}
		ids[m.ID], addrs[m.Addr] = true, true
		out = append(out, m)
	}
	return out
}

// joined records slot's join and the answer's cluster, if any: the
// members, refreshed from every answer, and the relay the slot is on,
// which no other slot may pick; it starts the slots the members now
// allow. It returns the log fields naming the slot and relay (none from
// a single relay, whose logs stay as they were) and the relay's id.
func (r *roster) joined(slot int, res protocol.RelayJoinResult) ([]zap.Field, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.slots[slot]
	st.joined = true
	if res.Cluster == nil {
		if st.target != "" {
			delete(r.failed, st.target)
		}
		return r.fieldsLocked(slot, st.target), st.target
	}
	id := res.Cluster.Relay
	if len(id) > maxRelayIDLen {
		id = ""
	}
	if r.wsOnly {
		if !r.clustered {
			r.s.log.Info("the relay is one of a cluster, but its relays are named by outpost:// addresses and the relay URL is outpost+ws://: keeping one session (set --relay-connections to join them)",
				zap.String("executor", r.cfg.ID))
		}
		r.clustered = true
		st.target = ""
		return r.fieldsLocked(slot, id), id
	}
	r.learnLocked(res.Cluster.Members)
	first := !r.clustered
	r.clustered = true
	if id != "" {
		// The answer names the relay the slot is on, which a join through
		// the configured URL learns only now.
		st.target = id
		delete(r.failed, id)
	}
	if first {
		r.s.log.Info("the relay is one of a cluster; keeping a session on each of several of its relays",
			zap.String("executor", r.cfg.ID), zap.Int("relays", len(r.members)), zap.Int("sessions", r.want()))
	}
	r.spawnLocked()
	return r.fieldsLocked(slot, id), id
}

// learn takes the members a draining relay names in its reconnect
// notice (it has left them already), so the slot it sends away goes to
// one of the others, newcomers included.
func (r *roster) learn(members []protocol.RelayMember) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.wsOnly {
		return
	}
	r.learnLocked(members)
}

// learnLocked refreshes the members from an answer's list.
func (r *roster) learnLocked(list []protocol.RelayMember) {
	members := validMembers(list, r.fp)
	if len(members) == 0 {
		return
	}
	r.members = members
	for k := range r.failed {
		if !containsMember(members, k) {
			delete(r.failed, k)
		}
	}
}

func containsMember(members []protocol.RelayMember, id string) bool {
	for _, m := range members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// fieldsLocked are the log fields of slot on relay id: none until a
// cluster is known, so a single relay's logs are as they always were.
func (r *roster) fieldsLocked(slot int, id string) []zap.Field {
	if !r.clustered {
		return nil
	}
	return []zap.Field{zap.Int("slot", slot), zap.String("relay_id", id)}
}

// release ends slot's attempt: its relay is free for other slots again,
// and an attempt that never joined marks its member failed.
func (r *roster) release(slot int, joined bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := &r.slots[slot]
	if st.target != "" && containsMember(r.members, st.target) {
		if joined {
			delete(r.failed, st.target)
		} else {
			r.failed[st.target] = true
		}
	}
	st.target, st.configured, st.joined = "", false, false
}

// stop marks slot ended, once its goroutine is done with it.
func (r *roster) stop(slot int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.slots[slot].active {
		r.slots[slot] = slotState{}
		r.running--
	}
}

// runSlot keeps slot joined — Join's loop of joinOnce, backoff and
// drain, around a target picked afresh for every attempt — until the
// slots' context ends, a refusal ends them all, or the slot is surplus.
func (r *roster) runSlot(slot int) {
	defer r.wg.Done()
	defer r.stop(slot)
	s, ctx := r.s, r.ctx
	bo := backoff.Backoff{Initial: 100 * time.Millisecond, Max: 30 * time.Second}
	var draining *relayclient.Conn // the old session of the last reconnect notice
	defer func() {
		if draining != nil {
			draining.Close()
		}
	}()
	var left string
	leftConfigured := false
	for session := 1; ; session++ {
		t, ok := r.pick(slot, left, leftConfigured)
		if !ok {
			s.log.Info("every relay of the cluster has a session of this executor; ending this one", zap.String("executor", r.cfg.ID), zap.Int("slot", slot))
			// An old session still serving clients closes itself when
			// its relay or Join ends it.
			draining = nil
			return
		}
		addr := t.addr
		cfg := r.cfg
		cfg.RelayURL = t.url // its data connections go to the same relay
		bucket := fmt.Sprintf("relay %s session %d", addr, session)
		if slot > 0 {
			bucket = fmt.Sprintf("relay %s slot %d session %d", addr, slot, session)
		}
		relayID := t.id
		joinedAt, old, err := s.joinOnce(ctx, r.resp, bucket, cfg, func(res protocol.RelayJoinResult) []zap.Field {
			fields, id := r.joined(slot, res)
			relayID = cmp.Or(id, relayID)
			return fields
		}, func(p protocol.RelayReconnectParams) {
			if p.Cluster != nil {
				r.learn(p.Cluster.Members)
			}
		})
		r.release(slot, !joinedAt.IsZero())
		left, leftConfigured = relayID, t.configured
		r.mu.Lock()
		extra := r.fieldsLocked(slot, relayID)
		r.mu.Unlock()
		with := func(f ...zap.Field) []zap.Field { return append(f, extra...) }
		if errors.Is(err, ErrJoinRefused) {
			if errors.Is(err, ErrKeyRevoked) {
				s.log.Error("the relay has revoked this executor's key: it can never join again; remove executor.key (a new key is made) and join with a new join token",
					with(zap.String("executor", cfg.ID), zap.String("relay", addr), zap.Error(err))...)
			}
			r.end(err)
			return
		}
		if ctx.Err() != nil {
			return
		}
		// The relay holds another key than the URL names: a mistyped or
		// stale fingerprint, or not our relay. Retrying cannot help, and
		// an executor must not keep knocking at an impostor: end, saying
		// which key the relay presented.
		if km := (*relayclient.KeyMismatchError)(nil); errors.As(err, &km) {
			s.log.Error("the relay's key is not the one its URL names; not joining", with(zap.String("relay", addr),
				zap.String("named", km.Named.Fingerprint()), zap.String("presented", km.Presented.Fingerprint()))...)
			r.end(err)
			return
		}
		if old != nil {
			if draining != nil {
				draining.Close()
			}
			draining = old
			bo.Reset()
			s.log.Info("relay asked to reconnect; open client connections stay on the old session", with(zap.String("relay", addr))...)
			// Up to 250 ms, so a relay's executors do not all arrive at once.
			spread := backoff.Backoff{Initial: 250 * time.Millisecond, Max: 250 * time.Millisecond}
			if spread.Wait(ctx) != nil {
				return
			}
			continue
		}
		if !joinedAt.IsZero() && time.Since(joinedAt) > time.Minute {
			bo.Reset() // it was a healthy connection
		}
		switch {
		case errors.Is(err, ErrAlreadyJoined):
			s.log.Warn(fmt.Sprintf("executor id %s is already joined from another connection with this key — if this is not you, your executor.key is stolen: run `outpost executors revoke %s` on the relay", cfg.ID, cfg.ID),
				with(zap.String("executor", cfg.ID), zap.String("relay", addr), zap.Duration("backoff", bo.Ceiling()))...)
		case protocol.KindOf(err) != "":
			s.log.Warn("the relay cannot take this executor now; retrying", with(zap.String("relay", addr), zap.Error(err), zap.Duration("backoff", bo.Ceiling()))...)
		case joinedAt.IsZero() && errors.Is(err, transport.ErrHandshakeRefused):
			s.log.Warn("the relay refused the handshake; retrying", with(zap.String("relay", addr), zap.Error(err), zap.Duration("backoff", bo.Ceiling()))...)
		default:
			s.log.Info("relay connection ended; reconnecting", with(zap.Error(err), zap.Duration("backoff", bo.Ceiling()))...)
		}
		if bo.Wait(ctx) != nil {
			return
		}
	}
}
