package relay

// Token and executor-binding store.
//
// Only sha256(secret) is stored, never the secret itself. The records live
// in five buckets (tokens, token_ids, executors, revoked_keys, meta) on one
// of two backends, behind the small storeBackend interface below: one
// transaction reads and writes keys of the buckets, either as an update or
// as a read-only view. Every Store method is one transaction, so the
// semantics (a single-use token is consumed exactly once, the first key
// bound to an executor id wins, a revocation unbinds every id of the key)
// are the same on both:
//
//   - bbolt (OpenStore, store_bolt.go): one file in the relay's state
//     directory. The relay process and the `outpost token` CLI may use the
//     same file at the same time; bbolt takes an exclusive flock on the
//     file, so the store never keeps it open: every operation opens the
//     file (waiting at most storeLockTimeout for the lock), runs one
//     transaction and closes it. Transactions are serial.
//   - etcd (NewEtcdStore, store_etcd.go): keys <prefix>/<bucket>/<key>,
//     shared by any number of relays. Transactions are optimistic: reads
//     happen at one revision, writes are buffered and committed by one etcd
//     Txn that compares the revisions of everything read, retried on a
//     conflict. So a function passed to update may run more than once, and
//     must set its results afresh on each run.
//
// A store that cannot be reached (etcd down, or the bbolt file locked for
// longer than the lock timeout) fails with an error wrapping
// ErrStoreUnavailable: the relay answers such refusals with kind
// unavailable, and the executor or client tries again later.
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
	"path"
	"slices"
	"sort"
	"strings"
	"time"
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
	// Clients is how many client keys hold its uses (tokens with a use
	// limit; Store.RedeemFor).
	Clients int
	// RevocationSeq is the store's revocation sequence number when Redeem,
	// RedeemFor or Check read it: a relay holding a connection admitted
	// on it re-checks the token once the sequence moves past this
	// (RevokedTokens).
	RevocationSeq uint64
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
	// ErrNoStore: OpenExistingStore or OpenExistingEtcdStore found no
	// token store where it was pointed.
	ErrNoStore = errors.New("no token store")
	// ErrStoreUnavailable: the store could not be reached in time — etcd
	// did not answer within the request timeout, or another process held
	// the bbolt file's lock for longer than the lock timeout. Nothing was
	// decided; the same call may succeed later.
	ErrStoreUnavailable = errors.New("token store is unavailable")
	// ErrStoreContention: an etcd transaction kept conflicting with other
	// relays' transactions on the same keys for every one of its attempts.
	// Errors wrapping it wrap ErrStoreUnavailable too: like a bbolt lock
	// held too long, it is contention, and a later try may pass.
	ErrStoreContention = errors.New("token store transaction kept conflicting with concurrent ones")
	// ErrStoreNotEmpty: MigrateStore was pointed at a store that already
	// holds tokens, bindings or revocations; nothing was written.
	ErrStoreNotEmpty = errors.New("the destination token store already holds data")
)

const (
	secretPrefix    = "opt_"
	secretRandBytes = 32
	idRandBytes     = 8
	// idAttempts bounds the search for an unused token id (a collision of
	// 64 random bits is astronomically unlikely; a loop without a bound is
	// still a loop without a bound).
	idAttempts = 8
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

// storeBuckets are all the buckets, in the order MigrateStore copies them.
var storeBuckets = [][]byte{bucketTokens, bucketTokenIDs, bucketExecutors, bucketRevoked, bucketMeta}

var metaRevocationSeq = []byte("revocation_seq")

// storeTx is one transaction on the store's buckets. get answers nil for
// an absent key; the values get returns and forEach passes are valid only
// until the transaction ends, and must not be modified. forEach visits a
// bucket's keys in byte order, with the transaction's own writes applied;
// fn must not write to the store (collect, then write after the loop).
type storeTx interface {
	get(bucket, key []byte) ([]byte, error)
	put(bucket, key, value []byte) error
	delete(bucket, key []byte) error
	forEach(bucket []byte, fn func(k, v []byte) error) error
}

// storeBackend runs transactions. update's writes take effect all
// together or not at all, and only if fn returns nil; an optimistic
// backend may run fn several times (after a conflict), so fn must derive
// everything it reports from what it reads in that run. view is read-only
// and sees one consistent snapshot.
type storeBackend interface {
	update(fn func(tx storeTx) error) error
	view(fn func(tx storeTx) error) error
	close() error
}

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
	// Clients are the fingerprints of the client keys that spent its uses
	// (tokens with a use limit; Redeem).
	Clients []string `json:"clients,omitempty"`
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
		Clients:   len(r.Clients),
	}
}

// Store is the relay's persistent token and executor-binding store, on
// bbolt (OpenStore) or etcd (NewEtcdStore). It is safe for concurrent
// use, and several Store values (in one or several processes) may share
// one file or one etcd prefix.
type Store struct {
	path string           // the bbolt file; empty on etcd
	now  func() time.Time // the clock (tests set it)
	b    storeBackend
}

// Close releases the store. Neither backend holds anything between
// operations — bbolt opens its file per transaction, and the etcd client
// belongs to the caller of NewEtcdStore (it is shared with the cluster
// code), so it stays open — but callers close every Store they open so a
// backend that does hold something can be added without touching them.
func (s *Store) Close() error { return s.b.close() }

func (s *Store) update(fn func(tx storeTx) error) error { return s.b.update(fn) }
func (s *Store) view(fn func(tx storeTx) error) error   { return s.b.view(fn) }

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

	err = s.update(func(tx storeTx) error {
		// Pick an id not already in use (collisions are astronomically
		// unlikely, but cheap to rule out).
		rec.ID = ""
		for range idAttempts {
			var idb [idRandBytes]byte
			if _, err := rand.Read(idb[:]); err != nil {
				return fmt.Errorf("relay: generating token id: %w", err)
			}
			id := hex.EncodeToString(idb[:])
			v, err := tx.get(bucketTokenIDs, []byte(id))
			if err != nil {
				return err
			}
			if v == nil {
				rec.ID = id
				break
			}
		}
		if rec.ID == "" {
			return fmt.Errorf("relay: no unused token id in %d attempts", idAttempts)
		}
		old, err := tx.get(bucketTokens, key)
		if err != nil {
			return err
		}
		if old != nil {
			return errors.New("relay: token secret collision")
		}
		buf, err := json.Marshal(&rec)
		if err != nil {
			return err
		}
		if err := tx.put(bucketTokens, key, buf); err != nil {
			return err
		}
		return tx.put(bucketTokenIDs, []byte(rec.ID), key)
	})
	if err != nil {
		return "", Token{}, err
	}
	return secret, rec.token(), nil
}

// Check reports whether secret names a usable token of the given kind
// (not expired, not revoked, uses left, or client already holding one of
// its uses), as Redeem would find it, and consumes nothing. The relay
// checks in the handshake's message 1, which could be a replay, and
// redeems only once the client has proven the handshake fresh.
func (s *Store) Check(kind TokenKind, secret, client string) (Token, error) {
	key, sum, err := tokenKey(secret)
	if err != nil {
		return Token{}, err
	}
	var out Token
	err = s.view(func(tx storeTx) error {
		rec, err := s.usableRecord(tx, key, sum, kind)
		if err != nil {
			return err
		}
		if _, err := rec.spend(client, false); err != nil {
			return err
		}
		out = rec.token()
		out.RevocationSeq, err = revocationSeq(tx)
		return err
	})
	return out, err
}

// Redeem checks that secret names a usable token of the given kind (not
// expired, not revoked, uses left) and consumes one use of it, atomically.
// Tokens that are refused are not consumed. On etcd, any number of relays
// may redeem at once: a use is granted by exactly one committed
// transaction, never twice.
//
// RedeemFor is Redeem by a client whose key has fingerprint client: a use
// is spent once per client key ("" spends one each time): a token of
// --uses N admits N clients, and each of them reconnects — a resumed
// session, the next command — without spending more while the token is
// valid. The keys are kept in the token's record, at most
// maxRecordedClients of them; a token whose uses exceed that spends a use
// per connect beyond it.
func (s *Store) Redeem(kind TokenKind, secret string) (Token, error) {
	return s.RedeemFor(kind, secret, "")
}

// RedeemFor: see Redeem.
func (s *Store) RedeemFor(kind TokenKind, secret, client string) (Token, error) {
	key, sum, err := tokenKey(secret)
	if err != nil {
		return Token{}, err
	}
	var out Token
	if client != "" {
		// A client that holds a use already costs a read, not a write
		// (on etcd, a transaction and a WAL fsync saved per reconnect).
		held := false
		err := s.view(func(tx storeTx) error {
			rec, err := s.usableRecord(tx, key, sum, kind)
			if err != nil {
				return err
			}
			held = rec.Uses > 0 && slices.Contains(rec.Clients, client)
			out = rec.token()
			out.RevocationSeq, err = revocationSeq(tx)
			return err
		})
		if err != nil || held {
			return out, err
		}
	}
	err = s.update(func(tx storeTx) error {
		rec, err := s.usableRecord(tx, key, sum, kind)
		if err != nil {
			return err
		}
		changed, err := rec.spend(client, true)
		if err != nil {
			return err
		}
		if changed {
			nb, err := json.Marshal(rec)
			if err != nil {
				return err
			}
			if err := tx.put(bucketTokens, key, nb); err != nil {
				return err
			}
		}
		out = rec.token()
		out.RevocationSeq, err = revocationSeq(tx)
		return err
	})
	if err != nil {
		return Token{}, err
	}
	return out, nil
}

// maxRecordedClients bounds the client keys a token's record remembers
// (43 bytes each): the size of one etcd value stays far below its limit.
const maxRecordedClients = 1024

// tokenKey is the store key of secret and the secret's hash.
func tokenKey(secret string) ([]byte, [32]byte, error) {
	if len(secret) != secretLen || !strings.HasPrefix(secret, secretPrefix) {
		return nil, [32]byte{}, ErrTokenUnknown
	}
	sum := sha256.Sum256([]byte(secret))
	return []byte(hex.EncodeToString(sum[:])), sum, nil
}

// usableRecord reads the token at key and checks everything but its uses.
func (s *Store) usableRecord(tx storeTx, key []byte, sum [32]byte, kind TokenKind) (*tokenRecord, error) {
	buf, err := tx.get(bucketTokens, key)
	if err != nil {
		return nil, err
	}
	if buf == nil {
		return nil, ErrTokenUnknown
	}
	var rec tokenRecord
	if err := json.Unmarshal(buf, &rec); err != nil {
		return nil, fmt.Errorf("relay: corrupt token record: %w", err)
	}
	switch {
	case subtle.ConstantTimeCompare(rec.Hash, sum[:]) != 1:
		return nil, ErrTokenUnknown
	case rec.Kind != kind:
		return nil, ErrTokenKind
	case rec.Revoked:
		return nil, ErrTokenRevoked
	case !rec.ExpiresAt.IsZero() && !s.now().Before(rec.ExpiresAt):
		return nil, ErrTokenExpired
	}
	return &rec, nil
}

// spend takes one of the token's uses for client (when it holds none
// yet; do says whether to record it) and says whether the record changed.
// A token without a use limit counts uses without recording clients.
func (r *tokenRecord) spend(client string, do bool) (changed bool, err error) {
	if r.Uses > 0 && client != "" && slices.Contains(r.Clients, client) {
		return false, nil
	}
	if r.Uses > 0 && r.Used >= r.Uses {
		return false, ErrTokenUsedUp
	}
	if !do {
		return false, nil
	}
	r.Used++
	if r.Uses > 0 && client != "" && len(r.Clients) < maxRecordedClients {
		r.Clients = append(r.Clients, client)
	}
	return true, nil
}

// List returns every stored token (including expired, used-up and revoked
// ones), sorted by creation time.
func (s *Store) List() ([]Token, error) {
	var out []Token
	err := s.view(func(tx storeTx) error {
		out = nil
		return tx.forEach(bucketTokens, func(_, v []byte) error {
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
	return s.update(func(tx storeTx) error {
		key, err := tx.get(bucketTokenIDs, []byte(id))
		if err != nil {
			return err
		}
		if key == nil {
			return ErrTokenUnknown
		}
		key = append([]byte(nil), key...)
		buf, err := tx.get(bucketTokens, key)
		if err != nil {
			return err
		}
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
		if err := tx.put(bucketTokens, key, nb); err != nil {
			return err
		}
		// The revocation sequence moves, so relays holding connections
		// admitted on the token look again (RevokedTokens) and cut them.
		seq, err := revocationSeq(tx)
		if err != nil {
			return err
		}
		return tx.put(bucketMeta, metaRevocationSeq, binary.BigEndian.AppendUint64(nil, seq+1))
	})
}

// RevokedTokens reports which of the tokens with the given public ids are
// revoked (or gone), and the revocation sequence number the answer
// reflects. A relay asks about the tokens of its live connections when
// the sequence moves (Revoke moves it).
func (s *Store) RevokedTokens(ids []string) (revoked map[string]bool, seq uint64, err error) {
	err = s.view(func(tx storeTx) error {
		revoked = map[string]bool{}
		var err error
		if seq, err = revocationSeq(tx); err != nil {
			return err
		}
		for _, id := range ids {
			key, err := tx.get(bucketTokenIDs, []byte(id))
			if err != nil {
				return err
			}
			var buf []byte
			if key != nil {
				if buf, err = tx.get(bucketTokens, append([]byte(nil), key...)); err != nil {
					return err
				}
			}
			var rec tokenRecord
			if buf == nil || json.Unmarshal(buf, &rec) != nil || rec.Revoked {
				revoked[id] = true
			}
		}
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	return revoked, seq, nil
}

// BindExecutor records that executor id uses the given public key. The first
// binding wins and is persisted: binding the same key again succeeds, binding
// a different key fails with ErrExecutorKeyMismatch, and a revoked key
// with ErrKeyRevoked.
func (s *Store) BindExecutor(id string, key [32]byte) error {
	if id == "" {
		return errors.New("relay: executor id is empty")
	}
	return s.update(func(tx storeTx) error {
		revoked, err := tx.get(bucketRevoked, key[:])
		if err != nil {
			return err
		}
		if revoked != nil {
			return ErrKeyRevoked
		}
		old, err := tx.get(bucketExecutors, []byte(id))
		if err != nil {
			return err
		}
		if old == nil {
			return tx.put(bucketExecutors, []byte(id), key[:])
		}
		if subtle.ConstantTimeCompare(old, key[:]) != 1 {
			return ErrExecutorKeyMismatch
		}
		return nil
	})
}

// ExecutorKey returns the key bound to executor id, if any.
func (s *Store) ExecutorKey(id string) (key [32]byte, ok bool, err error) {
	err = s.view(func(tx storeTx) error {
		key, ok = [32]byte{}, false
		v, err := tx.get(bucketExecutors, []byte(id))
		if err != nil {
			return err
		}
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
	err := s.view(func(tx storeTx) error {
		st = ExecutorStatus{}
		var err error
		if st.Seq, err = revocationSeq(tx); err != nil {
			return err
		}
		revoked, err := tx.get(bucketRevoked, key[:])
		if err != nil {
			return err
		}
		st.KeyRevoked = revoked != nil
		v, err := tx.get(bucketExecutors, []byte(id))
		if err != nil {
			return err
		}
		if v != nil {
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
//
// It reads and bumps the revocation sequence number, so two revocations
// on etcd always conflict and one of them retries: neither can miss a
// binding the other made or removed. A binding of the key made
// concurrently under another id conflicts too (the scan of the executors
// bucket is compared as a range).
func (s *Store) RevokeExecutor(id string) (Revocation, error) {
	var rev Revocation
	err := s.update(func(tx storeTx) error {
		rev = Revocation{}
		v, err := tx.get(bucketExecutors, []byte(id))
		if err != nil {
			return err
		}
		if v == nil {
			return ErrExecutorUnknown
		}
		if len(v) != len(rev.Key) {
			return fmt.Errorf("relay: corrupt key for executor %q", id)
		}
		copy(rev.Key[:], v)
		err = tx.forEach(bucketExecutors, func(k, v []byte) error {
			if subtle.ConstantTimeCompare(v, rev.Key[:]) == 1 {
				rev.IDs = append(rev.IDs, string(k))
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, bound := range rev.IDs {
			if err := tx.delete(bucketExecutors, []byte(bound)); err != nil {
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
		if err := tx.put(bucketRevoked, rev.Key[:], buf); err != nil {
			return err
		}
		return tx.put(bucketMeta, metaRevocationSeq, binary.BigEndian.AppendUint64(nil, rev.Seq))
	})
	if err != nil {
		return Revocation{}, err
	}
	return rev, nil
}

// RevocationSeq is the number of revocations so far (executor keys and
// tokens): a relay that saw it move re-checks the keys of its joined
// executors (RevokedKeys) and the tokens of its live connections
// (RevokedTokens).
func (s *Store) RevocationSeq() (uint64, error) {
	var seq uint64
	err := s.view(func(tx storeTx) (err error) {
		seq, err = revocationSeq(tx)
		return err
	})
	return seq, err
}

// RevokedKeys reports which of keys are revoked, and the revocation
// sequence number the answer reflects.
func (s *Store) RevokedKeys(keys [][32]byte) (revoked map[[32]byte]bool, seq uint64, err error) {
	asked := make(map[[32]byte]bool, len(keys))
	for _, k := range keys {
		asked[k] = true
	}
	err = s.view(func(tx storeTx) error {
		revoked = map[[32]byte]bool{}
		var err error
		if seq, err = revocationSeq(tx); err != nil {
			return err
		}
		// One scan of the revoked keys rather than a read per asked key:
		// a relay asks about every joined executor (thousands), and on
		// etcd each read is a round trip, while revocations are few.
		return tx.forEach(bucketRevoked, func(k, _ []byte) error {
			if len(k) == 32 && asked[[32]byte(k)] {
				revoked[[32]byte(k)] = true
			}
			return nil
		})
	})
	if err != nil {
		return nil, 0, err
	}
	return revoked, seq, nil
}

func revocationSeq(tx storeTx) (uint64, error) {
	v, err := tx.get(bucketMeta, metaRevocationSeq)
	if err != nil {
		return 0, err
	}
	switch len(v) {
	case 0:
		return 0, nil
	case 8:
		return binary.BigEndian.Uint64(v), nil
	}
	return 0, errors.New("relay: corrupt revocation sequence number")
}
