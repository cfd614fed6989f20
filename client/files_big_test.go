package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/executor"
)

// A whole-file read under the executor's limit can still be too large for
// one JSON message once in base64: the client gets a clear error at once,
// and the connection stays up (it used to be dropped, and retried).
func TestFilesReadTooLargeForOneJSONMessageFailsClearly(t *testing.T) {
	srv, _ := executor.NewServer(executor.DefaultConfig())
	l, err := srv.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	env := dial(t, l.URL(), Config{})
	p := filepath.Join(t.TempDir(), "big")
	os.WriteFile(p, make([]byte, 60<<20), 0o644)
	_, err = env.ReadFile(ctxT(t), p)
	if err == nil || !strings.Contains(err.Error(), "fs/open") {
		t.Fatalf("%v", err)
	}
	if env.Reconnects() != 0 {
		t.Fatal("the connection was dropped")
	}
	os.WriteFile(p+".small", []byte("ok"), 0o644)
	if b, err := env.ReadFile(ctxT(t), p+".small"); err != nil || string(b) != "ok" {
		t.Fatalf("the connection is unusable after: %v", err)
	}
}
