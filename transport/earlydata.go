package transport

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"time"
)

// Early data: the first bytes of a client's transport stream (its mux
// frames: the control stream's opening, initialize, initialized,
// process/start) carried in the payload of Noise IK message 1, so that a
// cold start costs one round trip after TCP's. PROTOCOL.md section 2.7.
//
// Early data is bound to one executor *instance* — one process's strike
// register, named by a random EarlyInstance it makes at start and never
// stores — and not merely to the executor's key: a key copied to a second
// machine (containers, an HA pair), or a second executor started on the
// same state directory, is another instance, and a message 1 recorded on
// its way to one instance is refused by every other. The client learns the
// instance from message 2 of a completed handshake and names it in the
// early data it sends next.
//
// Payload of message 1, version 2:
//
//	offset size
//	0      1    EarlyDataVersion = 0x02
//	1      8    the client's clock, Unix milliseconds, uint64 big-endian
//	9      16   nonce: random, one per message 1 (the strike register's key)
//	25     16   the instance the early data is for (learned from message 2)
//	41     …    early bytes
//
// Version 1 (no instance, offset 25 the early bytes) is obsolete: an
// executor of this version never takes it, and answers so.
//
// Message 2's payload, to every IK message 1 (early data or not):
//
//	offset size
//	0      1    status: EarlyDataRefused, EarlyDataAccepted, EarlyDataReplayed, EarlyDataOtherInstance
//	1      16   the executor's current instance
//
// An executor that predates instances answers an empty payload, or a
// single status byte (0x01 / 0x02 to version 1 early data); a client reads
// either as "no instance to name": it sends no early data to it.
const (
	EarlyDataVersion byte = 0x02
	// EarlyInstanceSize is the size of an instance id.
	EarlyInstanceSize = 16
	earlyDataHeader   = 1 + 8 + 16 + EarlyInstanceSize
	// MaxEarlyData is the most early bytes one message 1 can carry.
	MaxEarlyData = MaxHandshakePayload - earlyDataHeader
	// earlyReplySize is the size of message 2's payload.
	earlyReplySize = 1 + EarlyInstanceSize
)

// Status of early data, message 2's first byte.
const (
	// EarlyDataRefused: no early bytes taken — none were sent, or the
	// executor could not vouch they were never seen (out of the window, a
	// full strike register, an unknown version). The initiator sends
	// them again, as the channel's first records.
	EarlyDataRefused byte = 0x00
	// EarlyDataAccepted: the responder took the early bytes as the start
	// of the stream.
	EarlyDataAccepted byte = 0x01
	// EarlyDataReplayed: the responder has taken early data with this
	// message 1's nonce before, on another connection — a copy raced ahead
	// of the original. The initiator must not re-send the early bytes in
	// band (their requests may have run); it fails the connection instead.
	EarlyDataReplayed byte = 0x02
	// EarlyDataOtherInstance: the early data names an instance that is not
	// the responder's current one (the executor restarted, or another
	// process holds the same key). Nothing was taken; the initiator sends
	// the bytes again as records, and names the instance of this message
	// 2 from now on.
	EarlyDataOtherInstance byte = 0x03
)

// EarlyInstance names one executor instance (see the file comment).
type EarlyInstance [EarlyInstanceSize]byte

// NewEarlyInstance makes a random instance id.
func NewEarlyInstance() (EarlyInstance, error) {
	var i EarlyInstance
	if _, err := rand.Read(i[:]); err != nil {
		return i, err
	}
	return i, nil
}

// String is the id in unpadded base64url.
func (i EarlyInstance) String() string { return base64.RawURLEncoding.EncodeToString(i[:]) }

// errEarlyInstance: a malformed instance id.
var errEarlyInstance = errors.New("transport: malformed early data instance id")

// ParseEarlyInstance reads an id written by String.
func ParseEarlyInstance(s string) (EarlyInstance, error) {
	var i EarlyInstance
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) != EarlyInstanceSize {
		return i, errEarlyInstance
	}
	copy(i[:], b)
	return i, nil
}

// EarlyData is a parsed message 1 payload.
type EarlyData struct {
	UnixMilli int64 // the client's clock
	Nonce     [16]byte
	Instance  EarlyInstance
	Bytes     []byte // the early bytes (aliasing the payload)
}

// EncodeEarlyData makes message 1's payload for early bytes (at most
// MaxEarlyData) for instance, stamped with now and a fresh nonce.
func EncodeEarlyData(now time.Time, instance EarlyInstance, early []byte) []byte {
	b := make([]byte, earlyDataHeader, earlyDataHeader+len(early))
	b[0] = EarlyDataVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(now.UnixMilli()))
	rand.Read(b[9:25])
	copy(b[25:earlyDataHeader], instance[:])
	return append(b, early...)
}

// ParseEarlyData splits an early data payload; ok is false for anything
// else (no payload, another version, no early bytes).
func ParseEarlyData(payload []byte) (d EarlyData, ok bool) {
	if len(payload) <= earlyDataHeader || payload[0] != EarlyDataVersion {
		return d, false
	}
	d.UnixMilli = int64(binary.BigEndian.Uint64(payload[1:9]))
	copy(d.Nonce[:], payload[9:25])
	copy(d.Instance[:], payload[25:earlyDataHeader])
	d.Bytes = payload[earlyDataHeader:]
	return d, true
}

// EncodeEarlyReply makes message 2's payload.
func EncodeEarlyReply(status byte, instance EarlyInstance) []byte {
	b := make([]byte, earlyReplySize)
	b[0] = status
	copy(b[1:], instance[:])
	return b
}

// EarlyReply is a parsed message 2 payload.
type EarlyReply struct {
	Status      byte
	Instance    EarlyInstance
	HasInstance bool // false: an executor that predates instances
}

// ParseEarlyReply reads message 2's payload. A payload of another shape
// (an older executor's: empty, or one status byte) has no instance; its
// one byte, if any, is still the status.
func ParseEarlyReply(reply []byte) EarlyReply {
	var r EarlyReply
	switch len(reply) {
	case earlyReplySize:
		r.HasInstance = true
		copy(r.Instance[:], reply[1:])
		fallthrough
	case 1:
		r.Status = reply[0]
	}
	return r
}
