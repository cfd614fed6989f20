package client

import (
	"context"
	"errors"
	"sync"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// A session through a relay outlives the relay: the executor keeps it
// while the client reconnects, and in a cluster the executor is joined to
// several relays, any of which takes the client (forwarding it one hop
// when it must). So a client must not be tied to the one relay it
// dialled — killed, that relay would take its commands with it. It keeps
// a list of relays to try instead:
//
//   - the addresses its URL lists (outpost://HOST1:PORT,HOST2:PORT#fp), in
//     the order written — not shuffled: the user orders them (the nearest
//     first, or a load balancer first and members behind it), and one
//     client's connections land on one relay, which keeps its log and its
//     metrics in one place; spreading clients is DNS's or a load
//     balancer's job, or the order each is given;
//   - then the members that relays of the cluster name in their answer to
//     relay/connect (protocol.RelayConnectResult.Cluster), at their
//     outpost:// addresses with the URL's fingerprint (every member holds
//     the cluster's key), refreshed from every answer — at most
//     protocol.MaxRelayMembers;
//   - and the relay that took the last connection goes first: the next
//     connection (a resume) goes back to it while it lives.
//
// One dial tries them in that order, moving on when a relay cannot be
// reached or answers for itself only (it is draining, detached from its
// cluster's etcd, its store unavailable, full), and stopping at the first
// answer that another relay would give too (a refused token, an executor
// offline across the cluster, a key that is not the pinned one). An
// outpost+ws:// URL learns no members: they are named by their outpost://
// addresses, which the HTTP-only network such a URL is for may not reach
// (as an executor's slots do, executor/multijoin.go).

// relayCandidates is one Remote's list of relays to try.
type relayCandidates struct {
	base       transport.URL // the configured URL
	configured []string      // its addresses
	learn      bool          // members are learnt (outpost://, not outpost+ws://)

	mu        sync.Mutex
	learned   []string // the last answer's members not configured, in its order
	preferred string   // the address of the relay that took the last connection
}

func newRelayCandidates(u transport.URL) *relayCandidates {
	return &relayCandidates{base: u, configured: u.Addrs(), learn: u.Scheme == transport.SchemeRelay}
}

// order is the relays to try now, each once: the preferred one, then the
// configured ones, then the learnt ones.
func (c *relayCandidates) order() []transport.URL {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]transport.URL, 0, 1+len(c.configured)+len(c.learned))
	seen := make(map[string]bool, cap(out))
	add := func(a string) {
		if a != "" && !seen[a] {
			seen[a] = true
			out = append(out, c.base.WithAddr(a))
		}
	}
	add(c.preferred)
	for _, a := range c.configured {
		add(a)
	}
	for _, a := range c.learned {
		add(a)
	}
	return out
}

// worked records the relay that took a connection.
func (c *relayCandidates) worked(addr string) {
	c.mu.Lock()
	c.preferred = addr
	c.mu.Unlock()
}

// heard takes the members a relay's answer names. An answer without a
// cluster (a single relay, or one that predates the field) leaves the
// list as it was: a relay of a cluster can be reached behind a load
// balancer that also fronts an older one.
func (c *relayCandidates) heard(res protocol.RelayConnectResult) {
	if !c.learn || res.Cluster == nil {
		return
	}
	configured := make(map[string]bool, len(c.configured))
	for _, a := range c.configured {
		configured[a] = true
	}
	learned := make([]string, 0, min(len(res.Cluster.Members), protocol.MaxRelayMembers))
	seen := make(map[string]bool)
	for _, m := range res.Cluster.Members {
		if len(learned) == protocol.MaxRelayMembers {
			break
		}
		if configured[m.Addr] || seen[m.Addr] {
			continue
		}
		// An address that makes no URL (a relay's mistaken
		// --cluster-advertise) is skipped, not dialled.
		if _, err := transport.ParseURL(c.base.WithAddr(m.Addr).String(), transport.SchemeRelay); err != nil {
			continue
		}
		seen[m.Addr] = true
		learned = append(learned, m.Addr)
	}
	c.mu.Lock()
	c.learned = learned
	c.mu.Unlock()
}

// nextRelay says whether a connection that failed through one relay is
// worth trying through another at once: the relay could not be reached or
// its connection broke (redialable), or it answered for itself only — it
// is draining, detached or without its store (unavailable, but not the
// executor offline, which every relay of a cluster says alike), or full.
func nextRelay(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var refusal *protocol.Error
	if !errors.As(err, &refusal) {
		return redialable(ctx, err)
	}
	switch protocol.KindOf(err) {
	case protocol.KindUnavailable:
		return refusal.Code != protocol.CodeNotFound
	case protocol.KindExhausted:
		return true
	}
	return false
}
