package client

import (
	"path/filepath"
	"sync"
	"testing"

	"github.com/outpost-exec/outpost/identity"
)

// pinLog records Config.OnPin's calls.
type pinLog struct {
	mu    sync.Mutex
	calls []pinCall
}

type pinCall struct {
	addr string
	key  identity.PublicKey
	file string
}

func (l *pinLog) onPin(addr string, key identity.PublicKey, file string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, pinCall{addr, key, file})
}

func (l *pinLog) get() []pinCall {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]pinCall(nil), l.calls...)
}

func TestOnPinReportsEachNewDirectPin(t *testing.T) {
	ex := startExecutor(t, nil)
	known := filepath.Join(t.TempDir(), "known_executors")
	var log pinLog
	cfg := Config{KnownExecutors: known, OnPin: log.onPin}
	addr := ex.ln.URL() // no fingerprint: trust on first use (Noise XX)
	env := dial(t, addr, cfg)
	want := []pinCall{{addr, ex.key.PublicKey(), known}}
	if got := log.get(); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("first contact: OnPin calls %+v, want %+v", got, want)
	}
	// A reconnect finds the pin (IK): nothing new.
	env.dropConnection()
	if out, err := Command(env, "echo", "again").Output(); err != nil || string(out) != "again\n" {
		t.Fatalf("after the reconnect: %q %v", out, err)
	}
	env.Close()
	// Later contacts, and keys pinned by the URL, are not reported.
	dial(t, addr, cfg).Close()
	dial(t, ex.url, Config{KnownExecutors: filepath.Join(t.TempDir(), "k"), OnPin: log.onPin}).Close()
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnPin calls %+v, want only the first contact's", got)
	}
}

func TestOnPinReportsAPinThroughTheRelay(t *testing.T) {
	relayURL, addr, clientToken, exKey := joinedRelay(t, "build-1", "build-*")
	known := filepath.Join(t.TempDir(), "known_executors")
	var log pinLog
	cfg := Config{Executor: "build-1", Token: clientToken, KnownExecutors: known, OnPin: log.onPin}
	env := dial(t, relayURL, cfg)
	want := pinCall{"outpost://" + addr + "/build-1", exKey.PublicKey(), known}
	if got := log.get(); len(got) != 1 || got[0] != want {
		t.Fatalf("first contact: OnPin calls %+v, want %+v", got, want)
	}
	if out, err := Command(env, "echo", "via relay").Output(); err != nil || string(out) != "via relay\n" {
		t.Fatalf("%q %v", out, err)
	}
	env.Close()
	dial(t, relayURL, cfg).Close()
	if got := log.get(); len(got) != 1 {
		t.Fatalf("OnPin calls %+v, want only the first contact's", got)
	}
}
