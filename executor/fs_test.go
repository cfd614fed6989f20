package executor

import (
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func writeHandle(t *testing.T) *fsHandle {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(t.TempDir(), "f"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return &fsHandle{f: f, write: true, sum: sha256.New()}
}

// Blocks that land out of order still give the file's digest, read back
// from the file rather than held in memory.
func TestRunningDigestSurvivesOutOfOrderBlocks(t *testing.T) {
	h := writeHandle(t)
	data := make([]byte, 10<<20+5)
	for i := range data {
		data[i] = byte(rand.IntN(256))
	}
	const block = 1 << 20
	var offs []int
	for off := 0; off < len(data); off += block {
		offs = append(offs, off)
	}
	// Swap neighbours: every pair arrives reversed.
	for i := 0; i+1 < len(offs); i += 2 {
		offs[i], offs[i+1] = offs[i+1], offs[i]
	}
	for _, off := range offs {
		b := data[off:min(off+block, len(data))]
		h.f.WriteAt(b, int64(off))
		h.account(uint64(off), b)
	}
	sum := sha256.Sum256(data)
	d := h.digest(uint64(len(data)))
	if d == nil || d.Sha256 != hex.EncodeToString(sum[:]) {
		t.Fatalf("digest %+v", d)
	}
}

// A client cannot make the executor hold or re-read much for the digest:
// a block far ahead, too many gaps, or a rewrite end the running digest.
func TestRunningDigestGivesUpOnHostileOrders(t *testing.T) {
	for name, blocks := range map[string][]uint64{
		"far ahead":     {0, 1 << 30},
		"rewrite":       {0, 0},
		"too many gaps": {2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34, 36, 38, 40, 42, 44, 46, 48, 50, 52, 54, 56, 58, 60, 62, 64, 66, 68},
	} {
		h := writeHandle(t)
		for _, off := range blocks {
			h.account(off, []byte{1})
		}
		if !h.broken || len(h.early) != 0 {
			t.Errorf("%s: broken=%v early=%d", name, h.broken, len(h.early))
		}
		if d := h.digest(1); d != nil {
			t.Errorf("%s: a digest %+v", name, d)
		}
	}
}
