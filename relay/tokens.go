package relay

// Token and executor-binding store.
//
// Tokens are persisted in a bbolt file. Only sha256(secret) is stored, never
// the secret itself. The relay process and the `outpost token` CLI may use the
// same file at the same time; bbolt takes an exclusive flock on the file, so
// the store never keeps it open: every operation opens the file (waiting at
// most storeLockTimeout for the lock), runs one transaction and closes it.
//
// Revoked executor keys live here too (`outpost executors revoke` writes
// them while the relay runs): each revocation bumps a sequence number, which
// a running relay polls to find the sessions it must cut.

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// TokenKind says what a token may be used for.
type TokenKind string

const (
	// TokenJoin lets an executor join the relay.
	TokenJoin TokenKind = "join"
	// TokenClient lets a client connect to executors through the relay.
	TokenClient TokenKind = "client"
)

// Token is the public (secret-free) view of a stored token.
type Token struct {
	ID        string            // public id (shown by ls, used by revoke)
	Kind      TokenKind         // join or client
	Labels    map[string]string // join tokens: labels given to the executor
	Executors string            // client tokens: ACL selector: "*" (any), or comma-separated executor ids, each may be a glob (path.Match)
	Uses      int               // 0 = unlimited
	Used      int               // successful redemptions so far
	CreatedAt time.Time         //
	ExpiresAt time.Time         // zero = never
	Revoked   bool              //
}

// Token states, as State reports them.
const (
	TokenActive  = "active"
	TokenUsedUp  = "used up"
	TokenExpired = "expired"
	TokenRevoked = "revoked"
)

// State is what Redeem would make of the token at now: revoked, expired,
// used up (in that order, as Redeem checks them) or active.
func (t Token) State(now time.Time) string {
	switch {
	case t.Revoked:
		return TokenRevoked
	case !t.ExpiresAt.IsZero() && !now.Before(t.ExpiresAt):
		return TokenExpired
	case t.Uses > 0 && t.Used >= t.Uses:
		return TokenUsedUp
	}
	return TokenActive
}

// CreateOptions configure a new token.
type CreateOptions struct {
	TTL       time.Duration     // 0 = never expires
	Uses      int               // 0 = unlimited
	Labels    map[string]string // join tokens
	Executors string            // client tokens: ACL selector (see Token.Executors)
}

// Errors returned by the store.
var (
	ErrTokenUnknown        = errors.New("token is not known to this relay")
	ErrTokenExpired        = errors.New("token has expired")
	ErrTokenRevoked        = errors.New("token has been revoked")
	ErrTokenUsedUp         = errors.New("token has no uses left")
	ErrTokenKind           = errors.New("token is of the wrong kind for this use")
	ErrExecutorKeyMismatch = errors.New("executor id is already bound to a different key")
	// ErrKeyRevoked: the key was revoked (RevokeExecutor) and may never
	// join again, under any id.
	ErrKeyRevoked = errors.New("this executor key has been revoked on the relay")
	// ErrExecutorUnknown: no key is bound to that executor id.
	ErrExecutorUnknown = errors.New("no key is bound to that executor id on this relay (it never joined, or was revoked already)")
)

const (
	secretPrefix     = "opt_"
	secretRandBytes  = 32
	idRandBytes      = 8
	storeLockTimeout = 2 * time.Second
	storeFileMode    = 0o600
	storeDirMode     = 0o700
)

// secretLen is the exact length of a well-formed secret.
var secretLen = len(secretPrefix) + base64.RawURLEncoding.EncodedLen(secretRandBytes)

var (
	bucketTokens    = []byte("tokens")       // hex(sha256(secret)) -> JSON tokenRecord
	bucketTokenIDs  = []byte("token_ids")    // token id -> hex(sha256(secret))
	bucketExecutors = []byte("executors")    // executor id -> 32-byte public key
	bucketRevoked   = []byte("revoked_keys") // 32-byte public key -> JSON revocationRecord
	bucketMeta      = []byte("meta")         // metaRevocationSeq -> uint64 big-endian
)

var metaRevocationSeq = []byte("revocation_seq")

// tokenRecord is what is persisted per token.
type tokenRecord struct {
	Hash      []byte            `json:"hash"` // sha256(secret)
	ID        string            `json:"id"`
	Kind      TokenKind         `json:"kind"`
	Labels    map[string]string `json:"labels,omitempty"`
	Executors string            `json:"executors,omitempty"`
	Uses      int               `json:"uses"`
	Used      int               `json:"used"`
	CreatedAt time.Time         `json:"created_at"`
	ExpiresAt time.Time         `json:"expires_at"`
	Revoked   bool              `json:"revoked"`
}

func (r *tokenRecord) token() Token {
	return Token{
		ID:        r.ID,
		Kind:      r.Kind,
		Labels:    copyLabels(r.Labels),
		Executors: r.Executors,
		Uses:      r.Uses,
		Used:      r.Used,
		CreatedAt: r.CreatedAt,
		ExpiresAt: r.ExpiresAt,
		Revoked:   r.Revoked,
	}
}

// Store is the relay's persistent token and executor-binding store. It is
// safe for concurrent use, and several Store values (in one or several
// processes) may share one file.
type Store struct {
	path string
	now  func() time.Time

	// mu serialises this Store's own operations so that goroutines of one
	// process queue on a mutex rather than polling the file lock; other
	// processes (or other Store values) are excluded by bbolt's flock.
	mu sync.Mutex
}

// OpenStore validates (creating if needed) the store file at path and its
// buckets, then closes it again. The parent directory is created with mode
// 0700 and the file with mode 0600.
func OpenStore(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("relay: token store path is empty")
	}
	if err := os.MkdirAll(filepath.Dir(path), storeDirMode); err != nil {
		return nil, fmt.Errorf("relay: creating token store directory: %w", err)
	}
	return openStore(path)
}

// openStore validates the store file at path, adding missing buckets.
func openStore(path string) (*Store, error) {
	s := &Store{path: path, now: time.Now}
	err := s.update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketTokens, bucketTokenIDs, bucketExecutors, bucketRevoked, bucketMeta} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// ErrNoStore: OpenExistingStore found no token store at its path.
var ErrNoStore = errors.New("no token store")

// OpenExistingStore is OpenStore for commands that only read or amend an
// existing store (listing, revoking): it creates nothing, and a missing
// directory or file fails with ErrNoStore, so a mistyped state directory
// is reported rather than answered from a new, empty store.
func OpenExistingStore(path string) (*Store, error) {
	if path == "" {
		return nil, errors.New("relay: token store path is empty")
	}
	dir := filepath.Dir(path)
	if _, err := os.Stat(dir); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("relay: %w: the state directory %s does not exist (give the relay's --state-dir)", ErrNoStore, dir)
		}
		return nil, fmt.Errorf("relay: state directory: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("relay: %w: %s does not exist (is %s the relay's --state-dir? relay init, relay serve and token create make it)", ErrNoStore, path, dir)
		}
		return nil, fmt.Errorf("relay: token store: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("relay: token store %s is not a regular file", path)
	}
	// The file exists: adding buckets a store made by an older relay
	// lacks creates nothing in the file system.
	return openStore(path)
}

func (s *Store) open(readOnly bool) (*bolt.DB, error) {
	db, err := bolt.Open(s.path, storeFileMode, &bolt.Options{Timeout: storeLockTimeout, ReadOnly: readOnly})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			return nil, fmt.Errorf("relay: token store %s is locked by another user: %w", s.path, err)
		}
		return nil, fmt.Errorf("relay: opening token store %s: %w", s.path, err)
	}
	return db, nil
}

func (s *Store) update(fn func(tx *bolt.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := s.open(false)
	if err != nil {
		return err
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay: closing token store: %w", cerr)
	}
	return err
}

func (s *Store) view(fn func(tx *bolt.Tx) error) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	db, err := s.open(true)
	if err != nil {
		return err
	}
	err = db.View(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay: closing token store: %w", cerr)
	}
	return err
}

func bucket(tx *bolt.Tx, name []byte) (*bolt.Bucket, error) {
	b := tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("relay: token store is missing bucket %q", name)
	}
	return b, nil
}

// Create makes a new token and returns its secret (shown to the operator once
// and never stored) together with its public description.
func (s *Store) Create(kind TokenKind, o CreateOptions) (secret string, t Token, err error) {
	if kind != TokenJoin && kind != TokenClient {
		return "", Token{}, fmt.Errorf("relay: unknown token kind %q", kind)
	}
	if o.TTL < 0 {
		return "", Token{}, errors.New("relay: token TTL must not be negative")
	}
	if o.Uses < 0 {
		return "", Token{}, errors.New("relay: token uses must not be negative")
	}
	if err := validateSelector(o.Executors); err != nil {
		return "", Token{}, err
	}

	var raw [secretRandBytes]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", Token{}, fmt.Errorf("relay: generating token secret: %w", err)
	}
	secret = secretPrefix + base64.RawURLEncoding.EncodeToString(raw[:])
	sum := sha256.Sum256([]byte(secret))
	key := []byte(hex.EncodeToString(sum[:]))

	now := s.now()
	rec := tokenRecord{
		Hash:      sum[:],
		Kind:      kind,
		Labels:    copyLabels(o.Labels),
		Executors: o.Executors,
		Uses:      o.Uses,
		CreatedAt: now,
	}
	if o.TTL > 0 {
		rec.ExpiresAt = now.Add(o.TTL)
	}

	err = s.update(func(tx *bolt.Tx) error {
		toks, err := bucket(tx, bucketTokens)
		if err != nil {
			return err
		}
		ids, err := bucket(tx, bucketTokenIDs)
		if err != nil {
			return err
		}
		// Pick an id not already in use (collisions are astronomically
		// unlikely, but cheap to rule out).
		for {
			var idb [idRandBytes]byte
			if _, err := rand.Read(idb[:]); err != nil {
				return fmt.Errorf("relay: generating token id: %w", err)
			}
			rec.ID = hex.EncodeToString(idb[:])
			if ids.Get([]byte(rec.ID)) == nil {
				break
			}
		}
		if toks.Get(key) != nil {
			return errors.New("relay: token secret collision")
		}
		buf, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		if err := toks.Put(key, buf); err != nil {
			return err
		}
		return ids.Put([]byte(rec.ID), key)
	})
	if err != nil {
		return "", Token{}, err
	}
	return secret, rec.token(), nil
}

// Redeem checks that secret names a usable token of the given kind (not
// expired, not revoked, uses left) and consumes one use of it, atomically.
// Tokens that are refused are not consumed.
func (s *Store) Redeem(kind TokenKind, secret string) (Token, error) {
	if len(secret) != secretLen || !strings.HasPrefix(secret, secretPrefix) {
		return Token{}, ErrTokenUnknown
	}
	sum := sha256.Sum256([]byte(secret))
	key := []byte(hex.EncodeToString(sum[:]))

	var out Token
	err := s.update(func(tx *bolt.Tx) error {
		toks, err := bucket(tx, bucketTokens)
		if err != nil {
			return err
		}
		buf := toks.Get(key)
		if buf == nil {
			return ErrTokenUnknown
		}
		var rec tokenRecord
		if err := json.Unmarshal(buf, &rec); err != nil {
			return fmt.Errorf("relay: corrupt token record: %w", err)
		}
		if subtle.ConstantTimeCompare(rec.Hash, sum[:]) != 1 {
			return ErrTokenUnknown
		}
		if rec.Kind != kind {
			return ErrTokenKind
		}
		if rec.Revoked {
			return ErrTokenRevoked
		}
		if !rec.ExpiresAt.IsZero() && !s.now().Before(rec.ExpiresAt) {
			return ErrTokenExpired
		}
		if rec.Uses > 0 && rec.Used >= rec.Uses {
			return ErrTokenUsedUp
		}
		rec.Used++
		nb, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		if err := toks.Put(key, nb); err != nil {
			return err
		}
		out = rec.token()
		return nil
	})
	if err != nil {
		return Token{}, err
	}
	return out, nil
}

// List returns every stored token (including expired, used-up and revoked
// ones), sorted by creation time.
func (s *Store) List() ([]Token, error) {
	var out []Token
	err := s.view(func(tx *bolt.Tx) error {
		toks, err := bucket(tx, bucketTokens)
		if err != nil {
			return err
		}
		return toks.ForEach(func(_, v []byte) error {
			var rec tokenRecord
			if err := json.Unmarshal(v, &rec); err != nil {
				return fmt.Errorf("relay: corrupt token record: %w", err)
			}
			out = append(out, rec.token())
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	sort.SliceStable(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return out[i].ID < out[j].ID
	})
	return out, nil
}

// Revoke marks the token with the given public id as revoked. Revoking an
// already revoked token is not an error.
func (s *Store) Revoke(id string) error {
	return s.update(func(tx *bolt.Tx) error {
		toks, err := bucket(tx, bucketTokens)
		if err != nil {
			return err
		}
		ids, err := bucket(tx, bucketTokenIDs)
		if err != nil {
			return err
		}
		key := ids.Get([]byte(id))
		if key == nil {
			return ErrTokenUnknown
		}
		key = append([]byte(nil), key...)
		buf := toks.Get(key)
		if buf == nil {
			return ErrTokenUnknown
		}
		var rec tokenRecord
		if err := json.Unmarshal(buf, &rec); err != nil {
			return fmt.Errorf("relay: corrupt token record: %w", err)
		}
		if rec.Revoked {
			return nil
		}
		rec.Revoked = true
		nb, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		return toks.Put(key, nb)
	})
}

// BindExecutor records that executor id uses the given public key. The first
// binding wins and is persisted: binding the same key again succeeds, binding
// a different key fails with ErrExecutorKeyMismatch, and a revoked key
// with ErrKeyRevoked.
func (s *Store) BindExecutor(id string, key [32]byte) error {
	if id == "" {
		return errors.New("relay: executor id is empty")
	}
	return s.update(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketExecutors)
		if err != nil {
			return err
		}
		rb, err := bucket(tx, bucketRevoked)
		if err != nil {
			return err
		}
		if rb.Get(key[:]) != nil {
			return ErrKeyRevoked
		}
		old := b.Get([]byte(id))
		if old == nil {
			return b.Put([]byte(id), key[:])
		}
		if subtle.ConstantTimeCompare(old, key[:]) != 1 {
			return ErrExecutorKeyMismatch
		}
		return nil
	})
}

// ExecutorKey returns the key bound to executor id, if any.
func (s *Store) ExecutorKey(id string) (key [32]byte, ok bool, err error) {
	err = s.view(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketExecutors)
		if err != nil {
			return err
		}
		v := b.Get([]byte(id))
		if v == nil {
			return nil
		}
		if len(v) != len(key) {
			return fmt.Errorf("relay: corrupt key for executor %q", id)
		}
		copy(key[:], v)
		ok = true
		return nil
	})
	if err != nil {
		return [32]byte{}, false, err
	}
	return key, ok, nil
}

// AllowsExecutor reports whether the token's Executors selector admits the
// executor id: "*" admits any executor; otherwise the selector is a
// comma-separated list of executor ids, each of which may be a path.Match
// glob. An empty selector admits nothing.
func (t Token) AllowsExecutor(id string) bool {
	if id == "" {
		return false
	}
	for _, pat := range strings.Split(t.Executors, ",") {
		pat = strings.TrimSpace(pat)
		switch {
		case pat == "":
			continue
		case pat == "*":
			return true
		}
		if ok, err := path.Match(pat, id); err == nil && ok {
			return true
		}
	}
	return false
}

// validateSelector rejects executor selectors containing malformed globs.
func validateSelector(sel string) error {
	for _, pat := range strings.Split(sel, ",") {
		pat = strings.TrimSpace(pat)
		if pat == "" {
			continue
		}
		if _, err := path.Match(pat, ""); err != nil {
			return fmt.Errorf("relay: bad executor pattern %q: %w", pat, err)
		}
	}
	return nil
}

func copyLabels(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// Revocation describes a revoked executor key.
type Revocation struct {
	Key       [32]byte
	IDs       []string // the executor ids it was bound to, now unbound
	RevokedAt time.Time
	Seq       uint64 // the store's revocation sequence number after it
}

type revocationRecord struct {
	IDs       []string  `json:"ids"`
	RevokedAt time.Time `json:"revoked_at"`
	Seq       uint64    `json:"seq"`
}

// ExecutorStatus is what the relay checks before it admits an executor.
type ExecutorStatus struct {
	Bound      bool     // a key is bound to the id
	BoundKey   [32]byte // that key
	KeyRevoked bool     // the asking key is revoked
	Seq        uint64   // the revocation sequence number the answer reflects
}

// CheckExecutor reports, in one transaction, the key bound to id and
// whether key is revoked.
func (s *Store) CheckExecutor(id string, key [32]byte) (ExecutorStatus, error) {
	var st ExecutorStatus
	err := s.view(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketExecutors)
		if err != nil {
			return err
		}
		rb, err := bucket(tx, bucketRevoked)
		if err != nil {
			return err
		}
		if st.Seq, err = revocationSeq(tx); err != nil {
			return err
		}
		st.KeyRevoked = rb.Get(key[:]) != nil
		if v := b.Get([]byte(id)); v != nil {
			if len(v) != len(st.BoundKey) {
				return fmt.Errorf("relay: corrupt key for executor %q", id)
			}
			copy(st.BoundKey[:], v)
			st.Bound = true
		}
		return nil
	})
	return st, err
}

// RevokeExecutor unbinds executor id and revokes its key, for good: the key
// can never join again, under any id (every other id bound to the same key
// is unbound too), and a running relay cuts its sessions when it next polls
// RevocationSeq. The id may then be bound afresh by a new key with a new
// join token. An id with no key bound fails with ErrExecutorUnknown.
func (s *Store) RevokeExecutor(id string) (Revocation, error) {
	var rev Revocation
	err := s.update(func(tx *bolt.Tx) error {
		b, err := bucket(tx, bucketExecutors)
		if err != nil {
			return err
		}
		rb, err := bucket(tx, bucketRevoked)
		if err != nil {
			return err
		}
		mb, err := bucket(tx, bucketMeta)
		if err != nil {
			return err
		}
		v := b.Get([]byte(id))
		if v == nil {
			return ErrExecutorUnknown
		}
		if len(v) != len(rev.Key) {
			return fmt.Errorf("relay: corrupt key for executor %q", id)
		}
		copy(rev.Key[:], v)
		err = b.ForEach(func(k, v []byte) error {
			if subtle.ConstantTimeCompare(v, rev.Key[:]) == 1 {
				rev.IDs = append(rev.IDs, string(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, bound := range rev.IDs {
			if err := b.Delete([]byte(bound)); err != nil {
				return err
			}
		}
		seq, err := revocationSeq(tx)
		if err != nil {
			return err
		}
		rev.Seq, rev.RevokedAt = seq+1, s.now()
		buf, err := json.Marshal(revocationRecord{IDs: rev.IDs, RevokedAt: rev.RevokedAt, Seq: rev.Seq})
		if err != nil {
			return err
		}
		if err := rb.Put(rev.Key[:], buf); err != nil {
			return err
		}
		return mb.Put(metaRevocationSeq, binary.BigEndian.AppendUint64(nil, rev.Seq))
	})
	if err != nil {
		return Revocation{}, err
	}
	return rev, nil
}

// RevocationSeq is the number of revocations so far: a relay that saw it
// move re-checks the keys of its joined executors (RevokedKeys).
func (s *Store) RevocationSeq() (uint64, error) {
	var seq uint64
	err := s.view(func(tx *bolt.Tx) (err error) {
		seq, err = revocationSeq(tx)
		return err
	})
	return seq, err
}

// RevokedKeys reports which of keys are revoked, and the revocation
// sequence number the answer reflects.
func (s *Store) RevokedKeys(keys [][32]byte) (revoked map[[32]byte]bool, seq uint64, err error) {
	revoked = map[[32]byte]bool{}
	err = s.view(func(tx *bolt.Tx) error {
		rb, err := bucket(tx, bucketRevoked)
		if err != nil {
			return err
		}
		if seq, err = revocationSeq(tx); err != nil {
			return err
		}
		for _, k := range keys {
			if rb.Get(k[:]) != nil {
				revoked[k] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return revoked, seq, nil
}

func revocationSeq(tx *bolt.Tx) (uint64, error) {
	mb, err := bucket(tx, bucketMeta)
	if err != nil {
		return 0, err
	}
	v := mb.Get(metaRevocationSeq)
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, errors.New("relay: corrupt revocation sequence number")
}
