package client

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// preDigestConn makes the executor behind it look like one from before
// digests had names: the "digest" member of fs/open, fs/create and fs/hash
// is dropped on the way, as such an executor ignores it (it answers
// sha256 whatever was asked).
type preDigestConn struct{ transport.MessageConn }

func (c preDigestConn) WriteRequest(ctx context.Context, id transport.ID, method string, params any) error {
	switch p := params.(type) {
	case protocol.FsOpenParams:
		p.Digest = ""
		params = p
	case protocol.FsCreateParams:
		p.Digest = ""
		params = p
	case protocol.FsHashParams:
		p.Digest = ""
		params = p
	}
	return c.MessageConn.WriteRequest(ctx, id, method, params)
}

func preDigestRemote(t *testing.T) *Remote {
	srv, err := executor.NewServer(executor.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := Config{Key: newKey(t), KnownExecutors: filepath.Join(t.TempDir(), "k")}.ready()
	if err != nil {
		t.Fatal(err)
	}
	r, err := newRemote(ctxT(t), "pre-digest", func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
		a, b := net.Pipe()
		go srv.ServeConn(context.Background(), transport.NewJSONConn(transport.NewLineFrames(a, a, a, 0)))
		rpc := NewRPC(preDigestConn{transport.NewJSONConn(transport.NewLineFrames(b, b, b, 0))}, func(m string, p transport.Params) { route(m, p, false) })
		return &conn{rpc: rpc, close: rpc.Close, shared: true}, nil
	}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// An executor that does not know named digests computes sha256 whatever
// was asked (and says nothing of it: here it says sha256, which the client
// reads the same way). Transfers to, from and between such executors
// check with sha256 and go through, never replacing a destination with an
// unchecked copy; next to a current executor both digests are computed.
func TestTransfersWithAnExecutorWithoutNamedDigestsCheckWithSHA256(t *testing.T) {
	ctx := ctxT(t)
	old := preDigestRemote(t).Files(nil)
	cur := localFiles(t, nil).Files(nil)
	dir := t.TempDir()
	src, up, down, between := filepath.Join(dir, "src"), filepath.Join(dir, "up"), filepath.Join(dir, "down"), filepath.Join(dir, "between")
	data := bytes.Repeat([]byte("new"), 1<<20)
	os.WriteFile(src, data, 0o644)
	os.WriteFile(up, []byte("the old destination"), 0o644)
	if _, err := Upload(ctx, old, src, up, TransferOptions{}); err != nil {
		t.Fatalf("upload: %v", err)
	}
	if _, err := Download(ctx, old, up, down, TransferOptions{}); err != nil {
		t.Fatalf("download: %v", err)
	}
	if _, err := CopyBetween(ctx, old, down, cur, between, TransferOptions{}); err != nil {
		t.Fatalf("between: %v", err)
	}
	within := filepath.Join(dir, "within")
	if _, err := CopyWithin(ctx, old, up, within, TransferOptions{Verify: true}); err != nil {
		t.Fatalf("within, verified: %v", err)
	}
	for _, p := range []string{up, down, between, within} {
		if got, _ := os.ReadFile(p); !bytes.Equal(got, data) {
			t.Fatalf("%s: %d bytes, want the source's %d", p, len(got), len(data))
		}
	}
	// And the checks are real: the handles' digests are sha256.
	w, err := old.Create(ctx, filepath.Join(dir, "w"), 0o644)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if sum, _, ok := w.Sum(); !ok || w.DigestAlgorithm() != protocol.DigestSHA256 || len(sum) != 64 {
		t.Fatalf("the writer's digest: %q %q %v", w.DigestAlgorithm(), sum, ok)
	}
}
