package transport

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/admission"
)

type wsauthClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *wsauthClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *wsauthClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// upgrade is the status Allow answers a request from remote with the
// given Authorization (none if "") and Origin headers.
func upgrade(a WSAuth, remote, auth, origin string) (int, http.Header) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	w := httptest.NewRecorder()
	if a.Allow(w, r) {
		return 200, w.Header()
	}
	return w.Code, w.Header()
}

// Wrong tokens from one address (an IPv6 /64 is one) block it: 429 even
// with the right token, for the rest of the window; other addresses, and
// the address once its window is over, are served. Origin refusals and
// missing tokens never count.
func TestWSAuthRefusesAnAddressThatSentTooManyWrongTokens(t *testing.T) {
	clock := &wsauthClock{t: time.Unix(1_700_000_000, 0)}
	lim, err := admission.New(admission.Config{MaxFailures: 3, Window: time.Minute, Now: clock.now})
	if err != nil {
		t.Fatal(err)
	}
	a := WSAuth{Token: "tok", Failures: lim}
	for range 50 {
		if got, _ := upgrade(a, "127.0.0.1:5000", "Bearer tok", "http://evil.example"); got != 403 {
			t.Fatalf("Origin: %d, want 403", got)
		}
		if got, _ := upgrade(a, "127.0.0.1:5000", "", ""); got != 401 {
			t.Fatalf("no token: %d, want 401", got)
		}
	}
	if got, _ := upgrade(a, "127.0.0.1:5000", "Bearer tok", ""); got != 200 {
		t.Fatalf("after Origin refusals and missing tokens the right token got %d, want 200", got)
	}
	for i, remote := range []string{"[2001:db8:1:2::a]:1", "[2001:db8:1:2::b]:2", "[2001:db8:1:2:ffff::c]:3"} {
		if got, _ := upgrade(a, remote, "Bearer guess", ""); got != 401 {
			t.Fatalf("wrong token %d: %d, want 401", i, got)
		}
	}
	got, h := upgrade(a, "[2001:db8:1:2::77]:4", "Bearer tok", "")
	if got != http.StatusTooManyRequests || h.Get("Retry-After") != "60" {
		t.Fatalf("right token from the blocked /64: %d (Retry-After %q), want 429 and 60", got, h.Get("Retry-After"))
	}
	if got, _ := upgrade(a, "[2001:db8:1:3::a]:1", "Bearer tok", ""); got != 200 {
		t.Fatalf("right token from another /64: %d", got)
	}
	if got, _ := upgrade(a, "[2001:db8:1:2::77]:4", "Bearer tok", "http://x"); got != 403 {
		t.Fatalf("Origin from the blocked /64: %d, want 403 (Origin is judged first)", got)
	}
	clock.advance(time.Minute - time.Second)
	if got, _ := upgrade(a, "[2001:db8:1:2::77]:4", "Bearer tok", ""); got != http.StatusTooManyRequests {
		t.Fatalf("before the window ended: %d, want 429", got)
	}
	clock.advance(time.Second)
	if got, _ := upgrade(a, "[2001:db8:1:2::77]:4", "Bearer tok", ""); got != 200 {
		t.Fatalf("after the window: %d, want 200", got)
	}
	if st := lim.Stats(); st.Failures != 3 || st.Refusals != 2 || st.Blocks != 1 {
		t.Fatalf("stats %+v, want 3 failures, 2 refusals, 1 block", st)
	}
}
