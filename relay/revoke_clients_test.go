package relay

import (
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

// revokeCutWithin is how soon a revoked token's live connections must be
// closed: the poll (1 s) and a margin for a loaded machine.
const revokeCutWithin = 3 * time.Second

// checkRevokedTokenCutsItsSession runs a command on env, revokes the
// token, and expects the session cut — by one of the relays in cut (the
// first to poll; the other's splice then ends with it) — and its resume
// refused.
func checkRevokedTokenCutsItsSession(t *testing.T, env *client.Remote, store *Store, tokenID string, cut ...*testRelay) {
	t.Helper()
	if out, err := client.Command(env, "/bin/echo", "before").Output(); err != nil || string(out) != "before\n" {
		t.Fatalf("%q %v", out, err)
	}
	if err := store.Revoke(tokenID); err != nil {
		t.Fatal(err)
	}
	before := make([]uint64, len(cut))
	for i, r := range cut {
		before[i] = r.srv.Stats().RevokedClients
	}
	start := time.Now()
	waitFor(t, revokeCutWithin, "the revoked token's connection cut", func() bool {
		for i, r := range cut {
			if r.srv.Stats().RevokedClients > before[i] {
				return true
			}
		}
		return false
	})
	t.Logf("cut %v after the revocation", time.Since(start))
	// The session's resume is a new connect: refused.
	_, err := client.Command(env, "/bin/echo", "after").Output()
	if protocol.KindOf(err) != protocol.KindRefused {
		t.Fatalf("a command after the revocation: %v (kind %q), want refused", err, protocol.KindOf(err))
	}
}

func TestRevokingAClientTokenCutsItsLiveSessions(t *testing.T) {
	r := newRelay(t)
	e := joinVia(t, r.url(), "x", r.token(t, TokenJoin, CreateOptions{}), key(t), 1)
	for _, path := range []string{"raw", "mux"} {
		t.Run(path, func(t *testing.T) {
			secret, tok, err := r.tokens.Create(TokenClient, CreateOptions{Executors: "*"})
			if err != nil {
				t.Fatal(err)
			}
			opts := client.Config{}
			if path == "raw" {
				opts = pinned(e)
			}
			env, err := dialVia(t, r, "x", secret, opts)
			if err != nil {
				t.Fatal(err)
			}
			checkRevokedTokenCutsItsSession(t, env, r.tokens, tok.ID, r)
		})
	}
	// Another token's session is untouched.
	env, err := dialVia(t, r, "x", r.token(t, TokenClient, CreateOptions{Executors: "*"}), client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := client.Command(env, "/bin/echo", "other").Output(); err != nil || string(out) != "other\n" {
		t.Fatalf("%q %v", out, err)
	}
}

// In a cluster the relay the client entered by and the relay its executor
// is joined to both watch it; whichever polls first cuts it.
func TestRevokingAClientTokenCutsItsSessionsAcrossTheCluster(t *testing.T) {
	tc := startClusterWith(t, 2, clusterOpts{etcdTokens: true})
	r1, r2 := tc.relays[0], tc.relays[1]
	joinOne(t, r1.url(), "e1", r1.token(t, TokenJoin, CreateOptions{}), key(t), 0)
	waitFor(t, testTimeout, "presence at r2", func() bool { return r2.srv.Stats().ClusterExecutors == 1 })
	secret, tok, err := r2.tokens.Create(TokenClient, CreateOptions{Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := dialVia(t, r2, "e1", secret, client.Config{})
	if err != nil {
		t.Fatal(err)
	}
	checkRevokedTokenCutsItsSession(t, env, r1.tokens, tok.ID, r1, r2)
}
