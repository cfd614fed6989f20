package transport

import (
	"bytes"
	"encoding/base64"
	"testing"
)

func TestEncodeBase64MatchesTheStandardEncoder(t *testing.T) {
	src := make([]byte, 1000)
	for i := range src {
		src[i] = byte(i*7 + i>>3)
	}
	for n := 0; n <= len(src); n++ {
		want := base64.StdEncoding.EncodeToString(src[:n])
		got := make([]byte, base64.StdEncoding.EncodedLen(n))
		encodeBase64(got, src[:n])
		if string(got) != want {
			t.Fatalf("len %d: got %q want %q", n, got, want)
		}
	}
}

func FuzzEncodeBase64(f *testing.F) {
	f.Add([]byte("hello, world"))
	f.Add([]byte{0xff, 0xfe, 0x00, 0x01, 0x80, 0x7f, 0x3f})
	f.Fuzz(func(t *testing.T, src []byte) {
		got := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
		encodeBase64(got, src)
		if want := base64.StdEncoding.EncodeToString(src); !bytes.Equal(got, []byte(want)) {
			t.Fatalf("%x: got %q want %q", src, got, want)
		}
	})
}

func BenchmarkEncodeBase64(b *testing.B) {
	src := make([]byte, 64<<10)
	dst := make([]byte, base64.StdEncoding.EncodedLen(len(src)))
	b.Run("outpost", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			encodeBase64(dst, src)
		}
	})
	b.Run("stdlib", func(b *testing.B) {
		b.SetBytes(int64(len(src)))
		for i := 0; i < b.N; i++ {
			base64.StdEncoding.Encode(dst, src)
		}
	})
}

func TestDecodeBase64MatchesTheStandardDecoder(t *testing.T) {
	src := make([]byte, 300)
	for i := range src {
		src[i] = byte(i*13 + 5)
	}
	for n := 0; n <= len(src); n++ {
		enc := base64.StdEncoding.EncodeToString(src[:n])
		dst := make([]byte, base64.StdEncoding.DecodedLen(len(enc)))
		m, ok := decodeBase64(dst, []byte(enc))
		if !ok || !bytes.Equal(dst[:m], src[:n]) {
			t.Fatalf("len %d: ok %v got %x", n, ok, dst[:m])
		}
	}
	for _, bad := range []string{"abc", "ab\ncd==", "a===", "!!!!", "AAAAA===", "AB=C", "ABC=AAAA", "QUJDRA=="[:7] + "x"} {
		dst := make([]byte, 16)
		if _, ok := decodeBase64(dst, []byte(bad)); ok {
			if _, err := base64.StdEncoding.Strict().DecodeString(bad); err != nil {
				t.Errorf("%q accepted; the standard decoder says %v", bad, err)
			}
		}
	}
}

func FuzzDecodeBase64(f *testing.F) {
	f.Add([]byte("aGVsbG8="))
	f.Add([]byte("AAAA\n"))
	f.Add([]byte("\n\n\n\n")) // the standard decoder skips newlines; ours must refuse them
	f.Fuzz(func(t *testing.T, src []byte) {
		dst := make([]byte, base64.StdEncoding.DecodedLen(len(src))+3)
		n, ok := decodeBase64(dst, src)
		want, err := base64.StdEncoding.Strict().DecodeString(string(src))
		if ok != (err == nil && !bytes.ContainsAny(src, "\r\n")) {
			t.Fatalf("%q: ok %v, standard error %v", src, ok, err)
		}
		if ok && !bytes.Equal(dst[:n], want) {
			t.Fatalf("%q: got %x want %x", src, dst[:n], want)
		}
	})
}
