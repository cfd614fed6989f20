package transport

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/outpost-exec/outpost/internal/admission"
)

// WSAuth is the check every codex WebSocket front end (the executor's
// ws:// listener, outpost bridge) makes on an upgrade before anything else:
// a request with an Origin header is refused (403: a web page must never
// reach a local executor), and when a token is set the request must carry
// it as "Authorization: Bearer <token>" (401 otherwise). The token is
// codex 0.171's capability token: given as the token itself, or only as
// its SHA-256 digest (codex's --ws-token-sha256), so the listener need
// not hold the secret. The zero value checks Origin only.
//
// With Failures set, a source address (an IPv4 address or an IPv6 /64,
// from the request's RemoteAddr) that sent too many wrong tokens is
// refused with 429 before its token is compared, for the rest of the
// limiter's window, so the token cannot be guessed at line rate. Only a
// wrong token counts: not an Origin refusal (any web page can make a
// browser send those to a loopback listener, and would lock the real
// client on loopback out), nor a missing token (a probe or a
// misconfigured client learns nothing from it). Behind a reverse proxy
// every client has the proxy's address, and shares its count.
type WSAuth struct {
	// Token is the bearer token ("": none, unless TokenSHA256 is set).
	Token string
	// TokenSHA256 is the digest of the bearer token (nil: none).
	TokenSHA256 []byte
	// Failures counts wrong tokens per source address and refuses the
	// addresses over its limit (nil: no limit).
	Failures *admission.Limiter
}

// Enabled reports whether a bearer token is required.
func (a WSAuth) Enabled() bool { return a.Token != "" || len(a.TokenSHA256) > 0 }

// Validate checks that a digest, if given, is a SHA-256 one.
func (a WSAuth) Validate() error {
	if len(a.TokenSHA256) != 0 && len(a.TokenSHA256) != sha256.Size {
		return fmt.Errorf("the token digest has %d bytes; a SHA-256 digest has %d", len(a.TokenSHA256), sha256.Size)
	}
	return nil
}

// Allow checks r and, when it is refused, writes the refusal (with the
// wording of codex's own server) and returns false.
func (a WSAuth) Allow(w http.ResponseWriter, r *http.Request) bool {
	if r.Header.Get("Origin") != "" {
		http.Error(w, "requests with an Origin header are refused", http.StatusForbidden)
		return false
	}
	if !a.Enabled() {
		return true
	}
	// The first Authorization header counts, as in codex's server, and
	// spaces before the token do not ("Bearer  tok" is tok, as codex
	// takes it); net/http has already trimmed those after it.
	source := admission.HostKey(r.RemoteAddr)
	if a.Failures != nil && !a.Failures.Allow(source) {
		w.Header().Set("Retry-After", strconv.Itoa(int(a.Failures.Config().Window.Seconds()+0.5))) // at most
		w.Header().Set("Connection", "close")
		http.Error(w, "too many invalid websocket bearer tokens from this address; try again later", http.StatusTooManyRequests)
		return false
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got = strings.TrimLeft(got, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") || got == "" {
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "missing websocket bearer token", http.StatusUnauthorized)
		return false
	}
	if !a.matches(got) {
		if a.Failures != nil {
			a.Failures.Fail(source)
		}
		w.Header().Set("WWW-Authenticate", "Bearer")
		http.Error(w, "invalid websocket bearer token", http.StatusUnauthorized)
		return false
	}
	return true
}

// matches compares in constant time: against the digest when there is
// one (both sides hashed, so lengths never leak), else the token.
func (a WSAuth) matches(got string) bool {
	if len(a.TokenSHA256) > 0 {
		sum := sha256.Sum256([]byte(got))
		return subtle.ConstantTimeCompare(sum[:], a.TokenSHA256) == 1
	}
	want := sha256.Sum256([]byte(a.Token))
	sum := sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(sum[:], want[:]) == 1
}

// ErrWSAuth marks a bad capability-token configuration.
var ErrWSAuth = errors.New("invalid websocket auth configuration")

// LoadWSAuth builds the check from codex's flags: mode "" (no token, or
// the env token when envToken is set) or "capability-token" with exactly
// one of tokenFile (an absolute path to a regular file; its content,
// trimmed of white space as codex trims it, is the token; it must not be
// readable by group or others — stricter than codex, which does not check)
// and digestHex (hex SHA-256 of the token).
func LoadWSAuth(mode, tokenFile, digestHex, envToken string) (WSAuth, error) {
	switch mode {
	case "":
		if tokenFile != "" || digestHex != "" {
			return WSAuth{}, fmt.Errorf("%w: --ws-token-file and --ws-token-sha256 need --ws-auth capability-token", ErrWSAuth)
		}
		return WSAuth{Token: envToken}, nil
	case "capability-token":
	default:
		return WSAuth{}, fmt.Errorf("%w: --ws-auth %q is not supported (only capability-token)", ErrWSAuth, mode)
	}
	switch {
	case tokenFile != "" && digestHex != "":
		return WSAuth{}, fmt.Errorf("%w: give --ws-token-file or --ws-token-sha256, not both", ErrWSAuth)
	case tokenFile != "":
		if !strings.HasPrefix(tokenFile, "/") {
			return WSAuth{}, fmt.Errorf("%w: --ws-token-file must be an absolute path, not %q", ErrWSAuth, tokenFile)
		}
		// O_NONBLOCK: opening a FIFO (or a device) must not wait for a
		// writer; the fstat below then refuses it. The checks are made on
		// the opened file, so a path swapped after them is never read.
		f, err := os.OpenFile(tokenFile, os.O_RDONLY|syscall.O_NONBLOCK, 0)
		if err != nil {
			return WSAuth{}, fmt.Errorf("%w: %v", ErrWSAuth, err)
		}
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return WSAuth{}, fmt.Errorf("%w: %v", ErrWSAuth, err)
		}
		if !st.Mode().IsRegular() {
			return WSAuth{}, fmt.Errorf("%w: %s is not a regular file", ErrWSAuth, tokenFile)
		}
		if st.Mode().Perm()&0o077 != 0 {
			return WSAuth{}, fmt.Errorf("%w: %s is readable by others (mode %04o); chmod 600 it", ErrWSAuth, tokenFile, st.Mode().Perm())
		}
		const maxToken = 4096
		buf, err := io.ReadAll(io.LimitReader(f, maxToken+1))
		if err != nil {
			return WSAuth{}, fmt.Errorf("%w: %v", ErrWSAuth, err)
		}
		if len(buf) > maxToken {
			return WSAuth{}, fmt.Errorf("%w: %s holds more than %d bytes", ErrWSAuth, tokenFile, maxToken)
		}
		// Trimmed of all surrounding white space, as codex reads it: a
		// token with a trailing space could never be sent (HTTP trims it).
		tok := strings.TrimSpace(string(buf))
		if tok == "" {
			return WSAuth{}, fmt.Errorf("%w: %s is empty", ErrWSAuth, tokenFile)
		}
		return WSAuth{Token: tok}, nil
	case digestHex != "":
		d, err := hex.DecodeString(digestHex)
		if err != nil || len(d) != sha256.Size {
			return WSAuth{}, fmt.Errorf("%w: --ws-token-sha256 must be %d hex digits", ErrWSAuth, 2*sha256.Size)
		}
		return WSAuth{TokenSHA256: d}, nil
	}
	return WSAuth{}, fmt.Errorf("%w: --ws-auth capability-token needs --ws-token-file or --ws-token-sha256", ErrWSAuth)
}
