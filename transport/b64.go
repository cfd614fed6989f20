package transport

import "encoding/base64"

// Standard base64 with padding, about twice as fast as encoding/base64 on
// large inputs: each table lookup emits two characters for 12 bits, so a
// 6-byte group costs four lookups instead of eight. process/output over
// JSON is base64; this is the executor's hottest loop on that front.

const b64Alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"

var b64Pairs = func() (t [4096][2]byte) {
	for i := range t {
		t[i] = [2]byte{b64Alphabet[i>>6], b64Alphabet[i&63]}
	}
	return t
}()

// encodeBase64 writes the standard, padded encoding of src into dst, which
// must have base64.StdEncoding.EncodedLen(len(src)) bytes.
func encodeBase64(dst, src []byte) {
	di, si := 0, 0
	for n := len(src) - len(src)%6; si < n; si, di = si+6, di+8 {
		s := src[si : si+6 : si+6]
		d := dst[di : di+8 : di+8]
		hi := uint(s[0])<<16 | uint(s[1])<<8 | uint(s[2])
		lo := uint(s[3])<<16 | uint(s[4])<<8 | uint(s[5])
		p := b64Pairs[hi>>12]
		d[0], d[1] = p[0], p[1]
		p = b64Pairs[hi&0xfff]
		d[2], d[3] = p[0], p[1]
		p = b64Pairs[lo>>12]
		d[4], d[5] = p[0], p[1]
		p = b64Pairs[lo&0xfff]
		d[6], d[7] = p[0], p[1]
	}
	base64.StdEncoding.Encode(dst[di:], src[si:])
}

// b64Quads maps two encoded characters to their 12 bits, or 0xffff when
// either is not in the alphabet.
var b64Quads = func() (t [65536]uint16) {
	var rev [256]int
	for i := range rev {
		rev[i] = -1
	}
	for i := 0; i < 64; i++ {
		rev[b64Alphabet[i]] = i
	}
	for i := range t {
		a, b := rev[i>>8], rev[i&0xff]
		if a < 0 || b < 0 {
			t[i] = 0xffff
		} else {
			t[i] = uint16(a<<6 | b)
		}
	}
	return t
}()

// decodeBase64 decodes standard, padded base64 strictly (no whitespace,
// canonical padding) into dst, which must hold
// base64.StdEncoding.DecodedLen(len(src)) bytes. It returns the decoded
// length, or false for anything encoding/base64 would reject.
func decodeBase64(dst, src []byte) (int, bool) {
	if len(src)%4 != 0 {
		return 0, false
	}
	di, si := 0, 0
	// All groups but the last (which may hold padding) take the fast path.
	for n := len(src) - 4; si < n; si, di = si+4, di+3 {
		s := src[si : si+4 : si+4]
		hi := b64Quads[uint(s[0])<<8|uint(s[1])]
		lo := b64Quads[uint(s[2])<<8|uint(s[3])]
		if hi == 0xffff || lo == 0xffff {
			return 0, false
		}
		v := uint(hi)<<12 | uint(lo)
		d := dst[di : di+3 : di+3]
		d[0], d[1], d[2] = byte(v>>16), byte(v>>8), byte(v)
	}
	tail := src[si:]
	for _, c := range tail {
		if c == '\r' || c == '\n' { // the standard decoder would skip them
			return 0, false
		}
	}
	n, err := base64.StdEncoding.Strict().Decode(dst[di:], tail)
	if err != nil {
		return 0, false
	}
	return di + n, true
}
