package digest

import (
	"crypto/sha256"
	"encoding/hex"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// The wire names give the published digests: sha256, and XXH3-128 in its
// canonical (big-endian) form, whose value for no input is in the xxHash
// reference's test vectors.
func TestDigestsAreTheirAlgorithms(t *testing.T) {
	h, ok := New(protocol.DigestXXH3)
	if !ok {
		t.Fatal("xxh3-128 unknown")
	}
	if got := Result(protocol.DigestXXH3, h, 0); got.XXH3 != "99aa06d3014798d86001c324468d497f" || got.Sha256 != "" {
		t.Fatalf("XXH3-128 of nothing: %+v", got)
	}
	for _, alg := range []string{"", protocol.DigestSHA256} {
		h, ok := New(alg)
		if !ok {
			t.Fatalf("%q unknown", alg)
		}
		h.Write([]byte("abc"))
		want := sha256.Sum256([]byte("abc"))
		if got := Result(alg, h, 3); got.Sha256 != hex.EncodeToString(want[:]) || got.XXH3 != "" || got.Size != 3 || got.Sum(alg) != got.Sha256 {
			t.Fatalf("%q: %+v", alg, got)
		}
	}
	if _, ok := New("md5"); ok {
		t.Fatal("md5 accepted")
	}
}
