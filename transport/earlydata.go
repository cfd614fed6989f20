package transport

import (
	"crypto/rand"
	"encoding/binary"
	"time"
)

// Early data: the first bytes of a client's transport stream (its mux
// frames: the control stream's opening, initialize, initialized,
// process/start) carried in the payload of Noise IK message 1, so that a
// cold start costs one round trip after TCP's. PROTOCOL.md section 2.7.
//
// Payload of message 1, version 1:
//
//	offset size
//	0      1    EarlyDataVersion = 0x01
//	1      8    the client's clock, Unix milliseconds, uint64 big-endian
//	9      16   nonce: random, one per message 1 (the executor's strike register key)
//	25     …    early bytes
//
// Message 2's payload answers: EarlyDataAccepted (the one byte 0x01) when
// the responder took the early bytes as the start of the stream; empty
// when it did not — the initiator then sends them again, as ordinary
// records. A responder that knows nothing of early data answers empty.
const (
	EarlyDataVersion  byte = 0x01
	EarlyDataAccepted byte = 0x01
	// EarlyDataReplayed (message 2's one byte 0x02): the responder has
	// taken early data with this message 1's nonce before, on another
	// connection — a copy raced ahead of the original. The initiator must
	// not re-send the early bytes in band (their requests may have run);
	// it fails the connection instead.
	EarlyDataReplayed byte = 0x02
	earlyDataHeader        = 1 + 8 + 16
	// MaxEarlyData is the most early bytes one message 1 can carry.
	MaxEarlyData = MaxHandshakePayload - earlyDataHeader
)

// EncodeEarlyData makes message 1's payload for early bytes (at most
// MaxEarlyData), stamped with now and a fresh nonce.
func EncodeEarlyData(now time.Time, early []byte) []byte {
	b := make([]byte, earlyDataHeader, earlyDataHeader+len(early))
	b[0] = EarlyDataVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(now.UnixMilli()))
	rand.Read(b[9:earlyDataHeader])
	return append(b, early...)
}

// ParseEarlyData splits an early data payload; ok is false for anything
// else (no payload, another version, no early bytes).
func ParseEarlyData(payload []byte) (unixMilli int64, nonce [16]byte, early []byte, ok bool) {
	if len(payload) <= earlyDataHeader || payload[0] != EarlyDataVersion {
		return 0, nonce, nil, false
	}
	copy(nonce[:], payload[9:earlyDataHeader])
	return int64(binary.BigEndian.Uint64(payload[1:9])), nonce, payload[earlyDataHeader:], true
}

// EarlyDataTaken reports whether message 2's payload accepts early data.
func EarlyDataTaken(reply []byte) bool { return len(reply) == 1 && reply[0] == EarlyDataAccepted }

// EarlyDataWasReplayed reports whether message 2's payload says the early
// data of this message 1 was taken before, on another connection.
func EarlyDataWasReplayed(reply []byte) bool { return len(reply) == 1 && reply[0] == EarlyDataReplayed }
