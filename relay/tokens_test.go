package relay

import (
	"bytes"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func newTestStore(t *testing.T) (*Store, string) {
	t.Helper()
	p := filepath.Join(t.TempDir(), "state", "tokens.db")
	s, err := OpenStore(p)
	if err != nil {
		t.Fatalf("OpenStore: %v", err)
	}
	return s, p
}

// fakeClock is an injectable clock for Store.now.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func TestOpenStoreCreatesPrivateFileAndDir(t *testing.T) {
	_, p := newTestStore(t)
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if m := fi.Mode().Perm(); m != 0o600 {
		t.Errorf("store file mode = %o, want 600", m)
	}
	di, err := os.Stat(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	if m := di.Mode().Perm(); m != 0o700 {
		t.Errorf("store dir mode = %o, want 700", m)
	}
}

func TestCreateThenRedeemReturnsToken(t *testing.T) {
	s, _ := newTestStore(t)
	labels := map[string]string{"os": "linux", "zone": "a"}
	secret, tok, err := s.Create(TokenJoin, CreateOptions{Labels: labels})
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	if !strings.HasPrefix(secret, "opt_") {
		t.Errorf("secret %q lacks opt_ prefix", secret)
	}
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(secret, "opt_"))
	if err != nil || len(raw) != 32 {
		t.Errorf("secret body is not 32 bytes of base64url: %d bytes, %v", len(raw), err)
	}
	if len(tok.ID) != 16 {
		t.Errorf("id %q is not 8 bytes of hex", tok.ID)
	}
	if strings.Contains(secret, tok.ID) {
		t.Errorf("public id %q appears in secret", tok.ID)
	}
	// Mutating the caller's map must not affect the stored token.
	labels["os"] = "changed"

	got, err := s.Redeem(TokenJoin, secret)
	if err != nil {
		t.Fatalf("Redeem: %v", err)
	}
	if got.ID != tok.ID || got.Kind != TokenJoin || got.Used != 1 || got.Uses != 0 {
		t.Errorf("Redeem returned %+v", got)
	}
	if got.Labels["os"] != "linux" || got.Labels["zone"] != "a" || len(got.Labels) != 2 {
		t.Errorf("labels = %v", got.Labels)
	}
	// Unlimited token: redeem again.
	got, err = s.Redeem(TokenJoin, secret)
	if err != nil || got.Used != 2 {
		t.Fatalf("second Redeem: %+v, %v", got, err)
	}
}

func TestRedeemWrongKindRefusedAndNotConsumed(t *testing.T) {
	s, _ := newTestStore(t)
	secret, _, err := s.Create(TokenClient, CreateOptions{Uses: 1, Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(TokenJoin, secret); !errors.Is(err, ErrTokenKind) {
		t.Fatalf("Redeem(join, client token) = %v, want ErrTokenKind", err)
	}
	if _, err := s.Redeem(TokenClient, secret); err != nil {
		t.Fatalf("Redeem(client) after wrong-kind attempt: %v", err)
	}
}

func TestRedeemUnknownOrGarbageSecretRefused(t *testing.T) {
	s, _ := newTestStore(t)
	secret, _, err := s.Create(TokenJoin, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A well-formed secret that was never issued.
	other := "opt_" + base64.RawURLEncoding.EncodeToString(bytes.Repeat([]byte{7}, 32))
	cases := []string{
		"",
		"opt_",
		"garbage",
		other,
		secret[:len(secret)-1],
		secret + "A",
		"xxx_" + secret[4:],
		strings.ToUpper(secret[:4]) + secret[4:],
		secret[:len(secret)-1] + string(rune(secret[len(secret)-1]^1)),
	}
	for _, c := range cases {
		if _, err := s.Redeem(TokenJoin, c); !errors.Is(err, ErrTokenUnknown) {
			t.Errorf("Redeem(%q) = %v, want ErrTokenUnknown", c, err)
		}
	}
	if _, err := s.Redeem(TokenJoin, secret); err != nil {
		t.Fatalf("real secret refused: %v", err)
	}
}

func TestSecretNeverWrittenToDBFile(t *testing.T) {
	s, p := newTestStore(t)
	var secrets []string
	for i := 0; i < 5; i++ {
		sec, _, err := s.Create(TokenJoin, CreateOptions{Uses: 3})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, sec)
		sec, _, err = s.Create(TokenClient, CreateOptions{Executors: "*"})
		if err != nil {
			t.Fatal(err)
		}
		secrets = append(secrets, sec)
	}
	for _, sec := range secrets {
		if _, err := s.Redeem(TokenJoin, sec); err != nil && !errors.Is(err, ErrTokenKind) {
			t.Fatal(err)
		}
	}
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range secrets {
		body := strings.TrimPrefix(sec, "opt_")
		raw, _ := base64.RawURLEncoding.DecodeString(body)
		for _, needle := range [][]byte{[]byte(sec), []byte(body), []byte(body[:16]), raw} {
			if bytes.Contains(data, needle) {
				t.Fatalf("DB file contains (part of) secret %q", sec)
			}
		}
	}
}

func TestTokenExpiresAfterTTL(t *testing.T) {
	s, _ := newTestStore(t)
	clk := &fakeClock{t: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	s.now = clk.Now

	secret, tok, err := s.Create(TokenJoin, CreateOptions{TTL: time.Nanosecond})
	if err != nil {
		t.Fatal(err)
	}
	if want := clk.Now().Add(time.Nanosecond); !tok.ExpiresAt.Equal(want) {
		t.Errorf("ExpiresAt = %v, want %v", tok.ExpiresAt, want)
	}
	never, _, err := s.Create(TokenJoin, CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Nanosecond)
	if _, err := s.Redeem(TokenJoin, secret); !errors.Is(err, ErrTokenExpired) {
		t.Fatalf("Redeem expired = %v, want ErrTokenExpired", err)
	}
	clk.Advance(100 * 365 * 24 * time.Hour)
	if _, err := s.Redeem(TokenJoin, never); err != nil {
		t.Fatalf("token without TTL refused: %v", err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	for _, tk := range list {
		if tk.ID == tok.ID && tk.Used != 0 {
			t.Errorf("expired token was consumed: Used=%d", tk.Used)
		}
	}
}

func TestRevokedTokenRefused(t *testing.T) {
	s, _ := newTestStore(t)
	secret, tok, err := s.Create(TokenClient, CreateOptions{Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(tok.ID); err != nil {
		t.Fatalf("Revoke: %v", err)
	}
	if err := s.Revoke(tok.ID); err != nil {
		t.Fatalf("second Revoke: %v", err)
	}
	if _, err := s.Redeem(TokenClient, secret); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("Redeem revoked = %v, want ErrTokenRevoked", err)
	}
	if err := s.Revoke("0000000000000000"); !errors.Is(err, ErrTokenUnknown) {
		t.Fatalf("Revoke(unknown) = %v, want ErrTokenUnknown", err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || !list[0].Revoked || list[0].Used != 0 {
		t.Fatalf("List after revoke = %+v", list)
	}
}

func TestUsedUpTokenRefusedAndNotOverconsumed(t *testing.T) {
	s, _ := newTestStore(t)
	secret, _, err := s.Create(TokenJoin, CreateOptions{Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		tk, err := s.Redeem(TokenJoin, secret)
		if err != nil || tk.Used != i {
			t.Fatalf("redeem %d: %+v %v", i, tk, err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := s.Redeem(TokenJoin, secret); !errors.Is(err, ErrTokenUsedUp) {
			t.Fatalf("Redeem used-up = %v, want ErrTokenUsedUp", err)
		}
	}
	list, _ := s.List()
	if list[0].Used != 2 {
		t.Fatalf("Used = %d after refused attempts, want 2", list[0].Used)
	}
}

// TestSingleUseTokenConcurrentRedeemSucceedsOnce guards against a
// check-then-increment race: 32 goroutines, split across two Store values on
// the same file (so both the in-process mutex and the file lock are in play),
// race to redeem a uses=1 token.
func TestSingleUseTokenConcurrentRedeemSucceedsOnce(t *testing.T) {
	s1, p := newTestStore(t)
	s2, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	secret, _, err := s1.Create(TokenJoin, CreateOptions{Uses: 1})
	if err != nil {
		t.Fatal(err)
	}
	const n = 32
	var ok, usedUp atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	errs := make(chan error, n)
	for i := 0; i < n; i++ {
		st := s1
		if i%2 == 1 {
			st = s2
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := st.Redeem(TokenJoin, secret)
			switch {
			case err == nil:
				ok.Add(1)
			case errors.Is(err, ErrTokenUsedUp):
				usedUp.Add(1)
			default:
				errs <- err
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("unexpected Redeem error: %v", err)
	}
	if ok.Load() != 1 || usedUp.Load() != n-1 {
		t.Fatalf("successes=%d usedUp=%d, want 1 and %d", ok.Load(), usedUp.Load(), n-1)
	}
	list, err := s1.List()
	if err != nil {
		t.Fatal(err)
	}
	if list[0].Used != 1 {
		t.Fatalf("Used = %d, want 1", list[0].Used)
	}
}

func TestTokensPersistAcrossReopen(t *testing.T) {
	s, p := newTestStore(t)
	secret, tok, err := s.Create(TokenJoin, CreateOptions{Uses: 2, Labels: map[string]string{"a": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Redeem(TokenJoin, secret); err != nil {
		t.Fatal(err)
	}
	revSecret, revTok, err := s.Create(TokenClient, CreateOptions{Executors: "*"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Revoke(revTok.ID); err != nil {
		t.Fatal(err)
	}

	s2, err := OpenStore(p)
	if err != nil {
		t.Fatalf("reopen: %v", err)
	}
	got, err := s2.Redeem(TokenJoin, secret)
	if err != nil {
		t.Fatalf("Redeem after reopen: %v", err)
	}
	if got.ID != tok.ID || got.Used != 2 || got.Labels["a"] != "b" {
		t.Fatalf("after reopen: %+v", got)
	}
	if _, err := s2.Redeem(TokenJoin, secret); !errors.Is(err, ErrTokenUsedUp) {
		t.Fatalf("use count not persisted: %v", err)
	}
	if _, err := s2.Redeem(TokenClient, revSecret); !errors.Is(err, ErrTokenRevoked) {
		t.Fatalf("revocation not persisted: %v", err)
	}
}

func TestListReturnsAllTokensSortedByCreation(t *testing.T) {
	s, _ := newTestStore(t)
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	s.now = clk.Now

	if l, err := s.List(); err != nil || len(l) != 0 {
		t.Fatalf("empty List = %v, %v", l, err)
	}
	var want []Token
	for i := 0; i < 5; i++ {
		kind, o := TokenJoin, CreateOptions{Uses: i, Labels: map[string]string{"n": string(rune('0' + i))}}
		if i%2 == 1 {
			kind, o = TokenClient, CreateOptions{TTL: time.Hour, Executors: "exec-*"}
		}
		_, tk, err := s.Create(kind, o)
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, tk)
		clk.Advance(-time.Minute) // later tokens get earlier timestamps
	}
	got, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("List len = %d, want %d", len(got), len(want))
	}
	for i := range got {
		w := want[len(want)-1-i]
		g := got[i]
		if g.ID != w.ID || g.Kind != w.Kind || g.Uses != w.Uses || g.Used != 0 ||
			g.Executors != w.Executors || !g.CreatedAt.Equal(w.CreatedAt) ||
			!g.ExpiresAt.Equal(w.ExpiresAt) || g.Revoked || g.Labels["n"] != w.Labels["n"] {
			t.Errorf("List[%d] = %+v, want %+v", i, g, w)
		}
	}
}

func TestExecutorBindingFirstWinsAndPersists(t *testing.T) {
	s, p := newTestStore(t)
	var k1, k2 [32]byte
	k1[0], k2[0] = 1, 2

	if _, ok, err := s.ExecutorKey("exec-1"); err != nil || ok {
		t.Fatalf("ExecutorKey before bind: ok=%v err=%v", ok, err)
	}
	if err := s.BindExecutor("exec-1", k1); err != nil {
		t.Fatalf("first bind: %v", err)
	}
	if err := s.BindExecutor("exec-1", k1); err != nil {
		t.Fatalf("same key again: %v", err)
	}
	if err := s.BindExecutor("exec-1", k2); !errors.Is(err, ErrExecutorKeyMismatch) {
		t.Fatalf("other key = %v, want ErrExecutorKeyMismatch", err)
	}
	if err := s.BindExecutor("exec-2", k2); err != nil {
		t.Fatalf("bind second executor: %v", err)
	}

	s2, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	key, ok, err := s2.ExecutorKey("exec-1")
	if err != nil || !ok || key != k1 {
		t.Fatalf("after reopen ExecutorKey(exec-1) = %x %v %v, want k1", key, ok, err)
	}
	if err := s2.BindExecutor("exec-1", k2); !errors.Is(err, ErrExecutorKeyMismatch) {
		t.Fatalf("after reopen other key = %v, want ErrExecutorKeyMismatch", err)
	}
	if key, ok, _ := s2.ExecutorKey("exec-2"); !ok || key != k2 {
		t.Fatalf("ExecutorKey(exec-2) = %x %v", key, ok)
	}
}

func TestAllowsExecutorSelectors(t *testing.T) {
	cases := []struct {
		sel, id string
		want    bool
	}{
		{"*", "anything", true},
		{"*", "", false},
		{"", "exec-1", false},
		{"exec-1", "exec-1", true},
		{"exec-1", "exec-10", false},
		{"exec-1,exec-2", "exec-2", true},
		{"exec-1, exec-2 ", "exec-2", true},
		{"exec-1,exec-2", "exec-3", false},
		{"web-*", "web-01", true},
		{"web-*", "db-01", false},
		{"db-?", "db-1", true},
		{"db-?", "db-10", false},
		{"gpu-[0-3]", "gpu-2", true},
		{"gpu-[0-3]", "gpu-4", false},
		{"a,web-*,b", "web-x", true},
		{"exec-1,*", "zzz", true},
		{"[", "[", false},
	}
	for _, c := range cases {
		tk := Token{Kind: TokenClient, Executors: c.sel}
		if got := tk.AllowsExecutor(c.id); got != c.want {
			t.Errorf("Executors=%q AllowsExecutor(%q) = %v, want %v", c.sel, c.id, got, c.want)
		}
	}
}

func TestCreateRejectsBadOptions(t *testing.T) {
	s, _ := newTestStore(t)
	if _, _, err := s.Create("bogus", CreateOptions{}); err == nil {
		t.Error("unknown kind accepted")
	}
	if _, _, err := s.Create(TokenJoin, CreateOptions{Uses: -1}); err == nil {
		t.Error("negative uses accepted")
	}
	if _, _, err := s.Create(TokenJoin, CreateOptions{TTL: -time.Second}); err == nil {
		t.Error("negative TTL accepted")
	}
	if _, _, err := s.Create(TokenClient, CreateOptions{Executors: "ok,bad["}); err == nil {
		t.Error("malformed glob accepted")
	}
}

// TestTwoStoresOnSameFileConcurrently simulates the relay and the `outpost
// token` CLI using one DB file at once: neither may fail with a lock timeout
// or lose the other's writes.
func TestTwoStoresOnSameFileConcurrently(t *testing.T) {
	relayStore, p := newTestStore(t)
	cliStore, err := OpenStore(p)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*n)
	secrets := make(chan string, n)

	// "CLI": creates tokens and revokes some.
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; i < n; i++ {
			sec, tk, err := cliStore.Create(TokenJoin, CreateOptions{Uses: 1})
			if err != nil {
				errs <- err
				return
			}
			secrets <- sec
			if _, err := cliStore.List(); err != nil {
				errs <- err
			}
			if i%5 == 4 {
				if err := cliStore.Revoke(tk.ID); err != nil {
					errs <- err
				}
			}
		}
		close(secrets)
	}()
	// "Relay": redeems tokens and binds executors.
	var redeemed atomic.Int32
	wg.Add(1)
	go func() {
		defer wg.Done()
		i := 0
		for sec := range secrets {
			_, err := relayStore.Redeem(TokenJoin, sec)
			if err != nil && !errors.Is(err, ErrTokenRevoked) {
				errs <- err
			}
			if err == nil {
				redeemed.Add(1)
			}
			var k [32]byte
			k[0] = byte(i)
			if err := relayStore.BindExecutor("exec-"+string(rune('a'+i)), k); err != nil {
				errs <- err
			}
			i++
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent use: %v", err)
	}

	list, err := relayStore.List()
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != n {
		t.Fatalf("List len = %d, want %d", len(list), n)
	}
	used := 0
	for _, tk := range list {
		used += tk.Used
	}
	if used != int(redeemed.Load()) || used < n-n/5 {
		t.Fatalf("total Used = %d, redeemed = %d", used, redeemed.Load())
	}
	for i := 0; i < n; i++ {
		if _, ok, err := cliStore.ExecutorKey("exec-" + string(rune('a'+i))); err != nil || !ok {
			t.Fatalf("binding %d missing: %v %v", i, ok, err)
		}
	}
}
