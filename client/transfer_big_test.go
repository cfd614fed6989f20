package client

import (
	"crypto/sha256"
	"os"
	"path/filepath"
	"testing"
)

// A file of several blocks and a partial last one, random so a misplaced
// or repeated block cannot go unnoticed, goes up and back down over a
// real Noise + mux link on loopback; both copies must hash to the
// original's digest, and progress must count every byte once.
func TestTransferLargeRandomFileRoundTripsByteExact(t *testing.T) {
	ex := startExecutor(t, nil)
	f := dial(t, ex.url, Config{}).Files(nil)
	ctx := ctxT(t)
	dir := t.TempDir()
	data := randomData(t, 37<<20+4097) // 37 full blocks and a partial one
	want := sha256.Sum256(data)
	src := filepath.Join(dir, "src.bin")
	if err := os.WriteFile(src, data, 0o640); err != nil {
		t.Fatal(err)
	}
	var last Progress
	remote := filepath.Join(dir, "remote.bin")
	res, err := Upload(ctx, f, src, remote, TransferOptions{Progress: func(p Progress) { last = p }})
	if err != nil {
		t.Fatal(err)
	}
	if res.Bytes != int64(len(data)) || !last.Done || last.FileBytes != int64(len(data)) {
		t.Fatalf("upload: %d bytes, last progress %+v", res.Bytes, last)
	}
	up, err := os.ReadFile(remote)
	if err != nil || sha256.Sum256(up) != want {
		t.Fatalf("uploaded copy differs (%d bytes, %v)", len(up), err)
	}
	back := filepath.Join(dir, "back.bin")
	if res, err = Download(ctx, f, remote, back, TransferOptions{}); err != nil || res.Bytes != int64(len(data)) {
		t.Fatalf("download: %d bytes, %v", res.Bytes, err)
	}
	down, err := os.ReadFile(back)
	if err != nil || sha256.Sum256(down) != want {
		t.Fatalf("downloaded copy differs (%d bytes, %v)", len(down), err)
	}
	if fi, err := os.Stat(back); err != nil || fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode: %v %v", fi, err)
	}
}
