package relay

import (
	"github.com/outpost-exec/outpost/protocol"
)

// A client is connected through one relay, but its session outlives that
// relay: when it dies the client resumes through another member of the
// cluster, and to know the others it is told them in the answer to
// relay/connect (protocol.RelayConnectResult.Cluster), as an executor is
// in the answer to relay/join. The answer to a relay/connect made in the
// handshake travels in Noise message 2, whose payload is bounded
// (transport.MaxHandshakePayload), so the list is cut to
// protocol.MaxConnectClusterBytes.

// connectMembers is what an answer to relay/connect says of the cluster:
// this relay and its live members (as a join answer's, cluster.info),
// as many as fit protocol.MaxConnectClusterBytes; nil for a single relay.
func (s *Server) connectMembers() *protocol.RelayCluster {
	if s.cluster == nil {
		return nil
	}
	return boundMembers(s.cluster.info(), protocol.MaxConnectClusterBytes)
}

// memberFraming is a generous bound on a member's msgpack framing besides
// its id's and address's bytes: a 2-entry map (1 byte), the keys "id" and
// "addr" (3 and 5 bytes), and two string headers (at most 3 bytes each
// below 64 KiB).
const memberFraming = 1 + 3 + 5 + 3 + 3

// clusterFraming bounds a RelayCluster's own framing besides its members':
// a 2-entry map, the keys "relay" and "members", the relay id's string
// header and the members' array header (at most 3 bytes each).
const clusterFraming = 1 + 6 + 8 + 3 + 3

// boundMembers is rc with as many of its members, in their order, as keep
// its encoding within budget bytes (counted by the bounds above, so the
// real encoding is never longer). The answering relay's own id counts
// first; a cluster whose id alone does not fit is not named at all.
func boundMembers(rc *protocol.RelayCluster, budget int) *protocol.RelayCluster {
	used := clusterFraming + len(rc.Relay)
	if used > budget {
		return nil
	}
	out := &protocol.RelayCluster{Relay: rc.Relay, Members: make([]protocol.RelayMember, 0, len(rc.Members))}
	for _, m := range rc.Members {
		n := memberFraming + len(m.ID) + len(m.Addr)
		if used+n > budget {
			break
		}
		used += n
		out.Members = append(out.Members, m)
	}
	return out
}
