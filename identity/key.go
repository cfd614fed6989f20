// Package identity holds outpost's long-term identities and the trust
// decisions made about them.
//
// # Model
//
// Every outpost party (client, executor, relay) has one static X25519 key
// pair, the key it uses as the "s" key in its Noise handshakes. There are
// no certificates, names or authorities: a party IS its public key.
//
// A public key is written as its fingerprint: the 32 key bytes in
// unpadded base64url, 43 characters, e.g.
//
//	G_HPNbTmpEoCkYNxy63m5TcHqYXT8UdDZ4utYcUi9BI
//
// The fingerprint is not a hash of the key but the key itself, so anyone
// holding a pinned fingerprint can open a Noise IK handshake to that party
// directly, without a first round trip to learn its key.
//
// Trust is expressed with three kinds of files:
//
//   - A key file holds a party's private key (LoadOrCreate, Load). It is
//     created on first use with mode 0600 and refused if it is a symlink,
//     is readable or writable by group or others, or belongs to another
//     user. The public key is never stored; it is derived from the private
//     key.
//
//   - An allow-list (LoadAllowList) is the responder side's authorization:
//     one fingerprint per line, naming the initiators it accepts (for
//     example the clients an executor serves). It can be reloaded while in
//     use (AllowList.Reload).
//
//   - A known-executors file (OpenKnownExecutors) is the client side's
//     memory, like ssh's known_hosts: the first time a client reaches an
//     address it pins the key presented there (trust on first use); later
//     connections to that address must present the same key, and a
//     different key is a hard failure (KeyMismatchError) that only the
//     user can clear by editing the file.
//
// Default locations come from DefaultStateDir (a party's own key and
// state) and DefaultConfigDir (a client's key and known executors).
//
// File formats:
//
//	key file           outpost-x25519-private-key v1
//	                   <standard base64 of the 32-byte private key>
//
//	allow-list         # comment
//	                   <fingerprint> [free-form comment]
//
//	known executors    # comment
//	                   <address> <fingerprint> [free-form comment]
package identity

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"

	"github.com/flynn/noise"
)

// KeySize is the size in bytes of X25519 private and public keys.
const KeySize = 32

// FingerprintLen is the length of a fingerprint: 32 bytes in unpadded
// base64.
const FingerprintLen = 43

// basepoint is the X25519 base point (u = 9).
var basepoint = [KeySize]byte{9}

// Key is a static X25519 key pair. Its String and GoString methods print
// only the public fingerprint, so logging a Key does not leak the private
// half.
type Key struct {
	Private, Public [KeySize]byte
}

// Generate returns a fresh key pair from crypto/rand.
func Generate() (Key, error) {
	kp, err := noise.DH25519.GenerateKeypair(rand.Reader)
	if err != nil {
		return Key{}, fmt.Errorf("identity: generate key: %w", err)
	}
	var k Key
	if len(kp.Private) != KeySize || len(kp.Public) != KeySize {
		return Key{}, errors.New("identity: generate key: unexpected key size")
	}
	copy(k.Private[:], kp.Private)
	copy(k.Public[:], kp.Public)
	return k, nil
}

// KeyFromPrivate derives the key pair for a private key.
func KeyFromPrivate(private [KeySize]byte) (Key, error) {
	if private == ([KeySize]byte{}) {
		return Key{}, errors.New("identity: private key is all zeros")
	}
	pub, err := noise.DH25519.DH(private[:], basepoint[:])
	if err != nil {
		return Key{}, fmt.Errorf("identity: derive public key: %w", err)
	}
	if len(pub) != KeySize {
		return Key{}, errors.New("identity: derive public key: unexpected key size")
	}
	k := Key{Private: private}
	copy(k.Public[:], pub)
	return k, nil
}

// Keypair returns the key in the form the noise package takes as a static
// key. The slices are fresh copies.
func (k Key) Keypair() noise.DHKey {
	priv := k.Private
	pub := k.Public
	return noise.DHKey{Private: priv[:], Public: pub[:]}
}

// PublicKey returns the public half of k.
func (k Key) PublicKey() PublicKey { return PublicKey(k.Public) }

// String returns "Key(<fingerprint>)"; it never prints the private key.
func (k Key) String() string { return "Key(" + k.PublicKey().Fingerprint() + ")" }

// GoString is like String, so %#v does not print the private key either.
func (k Key) GoString() string { return "identity.Key{Public: " + k.PublicKey().Fingerprint() + "}" }

// PublicKey is an X25519 public key: a party's identity.
type PublicKey [KeySize]byte

// Fingerprint returns the key as unpadded base64url (43 characters). The
// fingerprint is the key itself, not a digest of it.
func (p PublicKey) Fingerprint() string {
	return base64.RawURLEncoding.EncodeToString(p[:])
}

// String returns the fingerprint.
func (p PublicKey) String() string { return p.Fingerprint() }

// IsZero reports whether p is the zero value (no key).
func (p PublicKey) IsZero() bool { return p == PublicKey{} }

// MarshalText encodes p as its fingerprint.
func (p PublicKey) MarshalText() ([]byte, error) { return []byte(p.Fingerprint()), nil }

// UnmarshalText parses a fingerprint as ParsePublicKey does.
func (p *PublicKey) UnmarshalText(text []byte) error {
	k, err := ParsePublicKey(string(text))
	if err != nil {
		return err
	}
	*p = k
	return nil
}

var (
	strictRawURL = base64.RawURLEncoding.Strict()
	strictRawStd = base64.RawStdEncoding.Strict()
	strictURL    = base64.URLEncoding.Strict()
	strictStd    = base64.StdEncoding.Strict()
)

// ParsePublicKey parses a fingerprint: 32 bytes in unpadded base64url
// (43 characters), the form Fingerprint produces. Standard base64, with or
// without "=" padding, is accepted too, as is padded base64url; leading and
// trailing white space is ignored. Decoding is strict (the unused low bits
// of the last character must be zero), so each key has exactly one
// accepted spelling per alphabet. The all-zero key is rejected.
func ParsePublicKey(s string) (PublicKey, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return PublicKey{}, errors.New("identity: empty public key")
	}
	var enc []*base64.Encoding
	switch {
	case len(s) == FingerprintLen:
		enc = []*base64.Encoding{strictRawURL, strictRawStd}
	case len(s) == FingerprintLen+1 && s[FingerprintLen] == '=':
		enc = []*base64.Encoding{strictURL, strictStd}
	default:
		return PublicKey{}, fmt.Errorf("identity: public key %s has %d characters; want %d (unpadded base64url of %d bytes)",
			quoteShort(s), len(s), FingerprintLen, KeySize)
	}
	var lastErr error
	for _, e := range enc {
		b, err := e.DecodeString(s)
		if err != nil {
			lastErr = err
			continue
		}
		if len(b) != KeySize {
			// Possible only if the decoder skipped '\r' or '\n'.
			lastErr = fmt.Errorf("decodes to %d bytes, want %d", len(b), KeySize)
			continue
		}
		var p PublicKey
		copy(p[:], b)
		if p.IsZero() {
			return PublicKey{}, errors.New("identity: public key is all zeros")
		}
		return p, nil
	}
	return PublicKey{}, fmt.Errorf("identity: public key %s is not valid base64: %v", quoteShort(s), lastErr)
}

// quoteShort quotes s for an error message, truncating long input.
func quoteShort(s string) string {
	const max = 64
	if len(s) > max {
		return fmt.Sprintf("%q...", s[:max])
	}
	return fmt.Sprintf("%q", s)
}
