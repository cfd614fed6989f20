package relay

import (
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outpost-exec/outpost/client"
)

func waitEntries(t *testing.T, logs *observer.ObservedLogs, msg string, n int) []observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		if got := logs.FilterMessage(msg).All(); len(got) >= n {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("fewer than %d %q log lines; have %v", n, msg, logs.All())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every client connect is an info line naming the client's key, the
// executor and the outcome; every refusal its kind. No token is logged.
func TestClientConnectsAndRefusalsAreAudited(t *testing.T) {
	r, logs := newRelayWith(t, nil)
	// The executor logs at info level (no debug core teed in): the argv
	// stays out of its lines.
	ecore, elogs := observer.New(zap.InfoLevel)
	elog := zap.New(ecore)
	e := joinLogged(t, r, "build-1", r.token(t, TokenJoin, CreateOptions{Uses: 1}), key(t), elog)
	e.waitJoined(t)
	clientTok := r.token(t, TokenClient, CreateOptions{Executors: "build-*"})
	ck := key(t)
	env, err := dialVia(t, r, "build-1", clientTok, client.Config{Key: ck})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env, "/bin/echo", "audit-me").CombinedOutput(); err != nil || !strings.Contains(string(out), "audit-me") {
		t.Fatalf("%q %v", out, err)
	}
	c := waitEntries(t, logs, "client connected", 1)[0].ContextMap()
	if c["client"] != ck.PublicKey().Fingerprint() || c["executor"] != "build-1" || c["outcome"] != "spliced" {
		t.Fatalf("connect fields %v", c)
	}

	// The executor's start and exit lines name the same client key, and
	// carry the argv's digest, not the argv.
	st := waitEntries(t, elogs, "process started", 1)[0].ContextMap()
	if st["client"] != ck.PublicKey().Fingerprint() || st["argv_sha256"] == nil || st["argv"] != nil {
		t.Fatalf("start fields %v", st)
	}
	if ex := waitEntries(t, elogs, "process exited", 1)[0].ContextMap(); ex["exit_code"] != int32(0) {
		t.Fatalf("exit fields %v", ex)
	}

	// Refusals: a bad token (refused), an id the token may not reach
	// (refused), an executor never joined (not_found).
	bad := "opt_" + strings.Repeat("A", 43)
	if _, err := dialVia(t, r, "build-1", bad, client.Config{Key: ck}); err == nil {
		t.Fatal("a bad token connected")
	}
	if _, err := dialVia(t, r, "other", clientTok, client.Config{Key: ck}); err == nil {
		t.Fatal("an id outside the token's scope connected")
	}
	if _, err := dialVia(t, r, "build-9", clientTok, client.Config{Key: ck}); err == nil {
		t.Fatal("an unknown executor connected")
	}
	refusals := waitEntries(t, logs, "client connect refused", 3)
	want := map[string]string{"build-1": "refused", "other": "refused", "build-9": "not_found"}
	for _, entry := range refusals {
		f := entry.ContextMap()
		id, _ := f["executor"].(string)
		if f["client"] != ck.PublicKey().Fingerprint() || f["outcome"] != "refused" || f["kind"] != want[id] {
			t.Errorf("refusal fields %v, want kind %q", f, want[id])
		}
		delete(want, id)
	}
	if len(want) != 0 {
		t.Errorf("no refusal line for %v", want)
	}
	for _, entry := range append(logs.All(), elogs.All()...) {
		for k, v := range entry.ContextMap() {
			if s, ok := v.(string); ok && (strings.Contains(s, clientTok) || strings.Contains(s, bad)) {
				t.Errorf("%q logs a token in %s", entry.Message, k)
			}
		}
	}
}
