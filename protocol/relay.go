package protocol

import (
	"errors"
	"fmt"
	"unicode"
	"unicode/utf8"
)

// Relay control messages: the first stream a party opens on its mux
// session with the relay carries one msgpack request and its response.
const (
	// MethodRelayJoin registers an executor (executor → relay). The
	// stream stays open while the executor is joined.
	MethodRelayJoin = "relay/join"
	// MethodRelayConnect asks for an executor (client → relay). After a
	// successful response the stream is spliced to a stream on the
	// executor's session and carries the client↔executor Noise channel.
	MethodRelayConnect = "relay/connect"
	// MethodRelayExecutors lists the joined executors.
	MethodRelayExecutors = "relay/executors"
	// MethodRelayData offers the relay a data connection (executor →
	// relay, in the payload of the Noise handshake's message 1): once the
	// executor has confirmed it, the connection waits, raw, for a client
	// to be spliced to it (PROTOCOL.md section 9.6).
	MethodRelayData = "relay/data"
	// MethodRelayReconnect (relay → executor, a notification on the join
	// stream) says the relay is draining: join afresh now, and keep
	// serving the open client streams on this session until it closes.
	MethodRelayReconnect = "relay/reconnect"
	// MethodRelayPeer opens a peer link (relay → relay of the same
	// cluster, on a connection authenticated by the cluster's relay key):
	// the dialling relay names itself; the link then carries one
	// relay/forward per stream.
	MethodRelayPeer = "relay/peer"
	// MethodRelayForward (relay → peer relay of the same cluster, in the
	// payload of the Noise handshake's message 1 on a connection of its
	// own) asks the peer to splice the connection to an executor joined
	// there: the one-hop forwarding of a client that reached another relay
	// of the cluster. The client's token was checked by the relay it
	// reached; the answer (message 2) is a RelayConnectResult. The
	// forwarding relay's first Noise record then holds RelayForwardReady,
	// and from there on the connection carries the client's bytes raw.
	MethodRelayForward = "relay/forward"
)

// RelayJoinResult answers relay/join. A relay of a cluster names itself
// and the cluster's live members, so the executor can keep sessions on
// several of them (`--relay-connections`); a single relay sends none.
type RelayJoinResult struct {
	Cluster *RelayCluster `json:"cluster,omitempty" msgpack:"cluster,omitempty"`
}

// RelayCluster describes the cluster a relay belongs to.
type RelayCluster struct {
	// Relay is the answering relay's id.
	Relay string `json:"relay" msgpack:"relay"`
	// Members are the cluster's live relays, the answering one included,
	// sorted by id.
	Members []RelayMember `json:"members" msgpack:"members"`
}

// RelayMember is one relay of a cluster: its id and the HOST:PORT its
// executors and peers dial (outpost:// with the cluster's fingerprint).
type RelayMember struct {
	ID   string `json:"id" msgpack:"id"`
	Addr string `json:"addr" msgpack:"addr"`
}

// RelayReconnectParams are relay/reconnect's: a draining member of a
// cluster names the members left, so the executor's session moves to one
// of them (a single relay sends none).
type RelayReconnectParams struct {
	Cluster *RelayCluster `json:"cluster,omitempty" msgpack:"cluster,omitempty"`
}

// MaxRelayMembers bounds the members a join answer lists.
const MaxRelayMembers = 64

// RelayPeerParams name the relay that opens a peer link.
type RelayPeerParams struct {
	Relay string `json:"relay" msgpack:"relay"`
}

// RelayForwardReady is the forwarding relay's first record on a
// relay/forward connection: only the holder of the handshake's keys can
// send it, so a replayed message 1 is answered but never spliced.
const RelayForwardReady = "outpost-forward/1"

// RelayForwardParams ask a peer relay for a connection to an executor
// joined there. Relay names the forwarding relay (a member of the
// cluster); Client and TokenID are for the peer's audit log only.
type RelayForwardParams struct {
	ExecutorID string `json:"executorId" msgpack:"executorId"`
	Relay      string `json:"relay" msgpack:"relay"`
	Client     string `json:"client,omitempty" msgpack:"client,omitempty"`
	TokenID    string `json:"tokenId,omitempty" msgpack:"tokenId,omitempty"`
}

// RelayJoinParams register an executor under ID. Token is needed only the
// first time: the relay binds the ID to the executor's static key.
type RelayJoinParams struct {
	ExecutorID string            `json:"executorId" msgpack:"executorId"`
	Token      string            `json:"token,omitempty" msgpack:"token,omitempty"`
	Labels     map[string]string `json:"labels,omitempty" msgpack:"labels,omitempty"`
	Version    string            `json:"version,omitempty" msgpack:"version,omitempty"`
}

// RelayConnectParams ask for a stream to an executor. Early, sent only in
// the payload of the Noise handshake with the relay, is the start of the
// client's own handshake with the executor (its preamble and IK message
// 1), which the relay forwards ahead of everything else.
type RelayConnectParams struct {
	ExecutorID string `json:"executorId" msgpack:"executorId"`
	Token      string `json:"token" msgpack:"token"`
	Early      []byte `json:"early,omitempty" msgpack:"early,omitempty"`
	// Confirm, with Early, promises that the client's first Noise record
	// after message 2 holds RelayConnectReady: only then does the relay
	// spend the token's use (PROTOCOL.md 9.3). Early without it is what
	// clients before it sent, and what a replayer of their recordings
	// has: answered as an older relay would (an empty message 2).
	Confirm bool `json:"confirm,omitempty" msgpack:"confirm,omitempty"`
	// Fresh, with Early and Confirm, is the client's clock (Unix
	// milliseconds, 8 bytes big-endian) and a random 16-byte nonce: a
	// relay that has not seen the nonce, with the clock in its window,
	// admits the connect at message 1 (one round trip to the executor);
	// otherwise after the confirmation.
	Fresh []byte `json:"fresh,omitempty" msgpack:"fresh,omitempty"`
}

// RelayConnectReady is a client's first record after a relay/connect in
// the handshake with Early and Confirm.
const RelayConnectReady = "outpost-connect/1"

// On a data connection (relay/data), the executor's first Noise record
// after the handshake holds RelayDataReady; from then on the connection
// carries raw bytes, and the relay's first is RelayDataClient, followed by
// a client's.
const (
	RelayDataReady       = "outpost-data/1"
	RelayDataClient byte = 0x01
)

// RelayDataParams offer a data connection for the joined executor ID
// (relay/data).
type RelayDataParams struct {
	ExecutorID string `json:"executorId" msgpack:"executorId"`
}

// RelayConnectResult carries the executor's key from the relay's
// directory (a client that has not pinned it takes it from here, once).
type RelayConnectResult struct {
	ExecutorKey string `json:"executorKey" msgpack:"executorKey"`
	// Verdict, in the answer to a relay/connect made in the handshake,
	// says that the relay spends the token's use and takes the slot only
	// once the client's first record has proven the connection fresh,
	// and then sends one record with the outcome (a 2-byte length and a
	// reply, as in the handshake's payload) before the connection goes
	// raw (PROTOCOL.md 9.3).
	Verdict bool `json:"verdict,omitempty" msgpack:"verdict,omitempty"`
	// Cluster, optional, is what a relay of a cluster says of it: its own
	// id and live members, as in a join answer, so that a client whose
	// session must resume after this relay dies can resume through another
	// member (at its outpost:// address, with the fingerprint of the URL
	// the client was given: every member holds the cluster's key). A single
	// relay, and one that predates the field, sends none. The answer may
	// travel in a Noise handshake message (PROTOCOL.md section 9.3), so the
	// relay lists only the members that fit MaxConnectClusterBytes.
	Cluster *RelayCluster `json:"cluster,omitempty" msgpack:"cluster,omitempty"`
}

// MaxConnectClusterBytes bounds the encoded size of a connect answer's
// Cluster (ids, addresses and their framing): the whole answer must fit a
// handshake payload (transport.MaxHandshakePayload, 4 KiB) beside the
// executor's key and the envelope.
const MaxConnectClusterBytes = 3072

// RelayExecutor describes a joined executor.
type RelayExecutor struct {
	ID             string            `json:"id" msgpack:"id"`
	Labels         map[string]string `json:"labels,omitempty" msgpack:"labels,omitempty"`
	Fingerprint    string            `json:"fingerprint" msgpack:"fingerprint"`
	ConnectedSince int64             `json:"connectedSince" msgpack:"connectedSince"` // unix ms
	Version        string            `json:"version,omitempty" msgpack:"version,omitempty"`
	// Relays are the relays of a cluster the executor is joined to now
	// (empty from a single relay).
	Relays []string `json:"relays,omitempty" msgpack:"relays,omitempty"`
}

// RelayExecutorsParams authorise a listing with a client token.
type RelayExecutorsParams struct {
	Token string `json:"token" msgpack:"token"`
}

// RelayExecutorsResult lists the executors the token may reach.
type RelayExecutorsResult struct {
	Executors []RelayExecutor `json:"executors" msgpack:"executors"`
}

// Relay refusals that a joining executor must tell apart (outpost's own
// codes; codex never talks to a relay).
const (
	// CodeRelayAlreadyJoined: the id is joined, with this same key, on
	// another connection that still answers. Retrying later is right (the
	// other connection may be this executor's own, about to die); if it
	// keeps happening the key is in two hands.
	CodeRelayAlreadyJoined = -32020
	// CodeRelayKeyRevoked: the operator revoked this key (`outpost
	// executors revoke`); it can never join again, under any id.
	CodeRelayKeyRevoked = -32021
)

// MaxExecutorIDLen bounds executor ids: they are map keys and log fields.
const MaxExecutorIDLen = 128

// ErrExecutorID is wrapped by CheckExecutorID's errors.
var ErrExecutorID = errors.New("invalid executor id")

// CheckExecutorID says whether id can name an executor at a relay: 1..128
// bytes of valid UTF-8 without whitespace, '/' or control characters (ids
// appear in URLs, logs and listings). The relay refuses other ids; clients
// and executors check before they connect, so a typo is a usage error.
func CheckExecutorID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: it is empty", ErrExecutorID)
	case len(id) > MaxExecutorIDLen:
		return fmt.Errorf("%w: %d bytes, the most is %d", ErrExecutorID, len(id), MaxExecutorIDLen)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w %q: not valid UTF-8", ErrExecutorID, id)
	}
	for _, r := range id {
		if r == '/' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return fmt.Errorf("%w %q: no spaces, '/' or control characters", ErrExecutorID, id)
		}
	}
	return nil
}
