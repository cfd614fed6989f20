// Package uuid makes random (version 4) UUIDs, the form of codex's session
// ids, which codex 0.171 expects of every exec-server's.
package uuid

import (
	"crypto/rand"
	"fmt"
)

// New returns a random UUID in its canonical 8-4-4-4-12 form.
func New() string {
	var b [16]byte
	rand.Read(b[:])         // never fails (crypto/rand panics rather)
	b[6] = b[6]&0x0f | 0x40 // version 4
	b[8] = b[8]&0x3f | 0x80 // RFC 9562 variant
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}
