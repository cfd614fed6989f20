package fsio

import (
	"bytes"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// Pieces land where one write would have put them, at every size around
// the piece boundary, and a failing write reports how far it got.
func TestWritesInPiecesLandLikeOneWrite(t *testing.T) {
	for _, n := range []int{0, 1, PieceBytes - 1, PieceBytes, PieceBytes + 1, 3*PieceBytes + 7} {
		data := make([]byte, n)
		for i := range data {
			data[i] = byte(rand.IntN(256))
		}
		f, err := os.Create(filepath.Join(t.TempDir(), "f"))
		if err != nil {
			t.Fatal(err)
		}
		if m, err := Write(f, data[:n/2]); m != n/2 || err != nil {
			t.Fatalf("Write %d: %d, %v", n/2, m, err)
		}
		if m, err := WriteAt(f, data[n/2:], int64(n/2)); m != n-n/2 || err != nil {
			t.Fatalf("WriteAt %d: %d, %v", n-n/2, m, err)
		}
		f.Close()
		got, _ := os.ReadFile(f.Name())
		if !bytes.Equal(got, data) {
			t.Fatalf("%d bytes: the file differs", n)
		}
	}
	f, _ := os.Open(filepath.Join(t.TempDir(), "."))
	defer f.Close()
	if m, err := Write(f, make([]byte, PieceBytes+1)); m != 0 || err == nil {
		t.Fatalf("a write to a directory: %d, %v", m, err)
	}
}
