// Package digest makes the hashes of outpost's end-to-end file checks by
// the names on the wire (protocol.DigestSHA256, protocol.DigestXXH3), so
// the executor and the client compute the same thing from one table.
package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"hash"

	"github.com/zeebo/xxh3"

	"github.com/outpost-exec/outpost/protocol"
)

// New returns a fresh hash for alg ("" is protocol.DigestSHA256), or
// false for a name it does not know.
func New(alg string) (hash.Hash, bool) {
	switch alg {
	case "", protocol.DigestSHA256:
		return sha256.New(), true
	case protocol.DigestXXH3:
		return &xxh128{xxh3.New()}, true
	}
	return nil, false
}

// Result is h's digest as the wire carries it: hex in alg's field.
func Result(alg string, h hash.Hash, size uint64) protocol.FsHashResult {
	sum := hex.EncodeToString(h.Sum(nil))
	if alg == protocol.DigestXXH3 {
		return protocol.FsHashResult{XXH3: sum, Size: size}
	}
	return protocol.FsHashResult{Sha256: sum, Size: size}
}

// xxh128 is XXH3 with its 128-bit result (the library's Sum is the 64-bit
// one); the bytes are big-endian, as XXH3's canonical form.
type xxh128 struct{ *xxh3.Hasher }

func (h *xxh128) Size() int { return 16 }

func (h *xxh128) Sum(b []byte) []byte {
	s := h.Sum128().Bytes()
	return append(b, s[:]...)
}
