package relay

// The etcd backend of the token store, shared by every relay of a cluster.
//
// Layout: one key per record, <prefix>/<bucket>/<key>, the buckets and
// keys exactly as in the bbolt file (tokens/<hex sha256 of the secret>,
// token_ids/<id>, executors/<executor id>, revoked_keys/<32 raw key
// bytes>, meta/revocation_seq), plus meta/store_version, written when a
// store is first opened on the prefix (NewEtcdStore), so that commands
// that must not create a store (OpenExistingEtcdStore) can tell a
// mistyped prefix from an empty store.
//
// Transactions are optimistic. A transaction's first read fixes a
// revision R, and every later read is made at R, so the function sees one
// consistent snapshot. Writes are buffered (later reads in the same
// transaction see them). At the end, one etcd Txn applies every write if
// and only if
//
//   - every key read still has the mod revision it had at R (0 for a key
//     that was absent: etcd compares a missing key as revision 0), and
//   - every bucket scanned in full (forEach) has no key modified or
//     created after R.
//
// If another transaction committed in between, the compare fails, nothing
// is written, and the function runs again on a fresh snapshot — at most
// etcdTxnAttempts times, with jittered backoff between, and never past the
// request timeout (then ErrStoreContention, wrapping ErrStoreUnavailable).
// So two relays redeeming the last use of a token cannot both succeed: both
// read its record at revision r, the first commit moves it past r, and the
// second retries, reads Used == Uses, and fails with ErrTokenUsedUp.
// A transaction that only read (or that failed) commits nothing.
//
// A deletion inside a scanned bucket is not seen by the range compare
// (there is no key left to compare); the one transaction that deletes —
// RevokeExecutor — reads and bumps meta/revocation_seq, so two of them
// always conflict on that key.
//
// Every call to etcd runs under one context per store operation, bounded
// by the request timeout: an unreachable cluster fails the operation with
// ErrStoreUnavailable, never hangs it. A commit whose answer is lost (the
// member died after applying it) is reported as unavailable although it
// may have been applied: a token use may then be lost, never granted twice.
//
// etcd refuses a Txn of more than 128 compares or operations (its
// --max-txn-ops default); the store's transactions read and write a few
// keys each, except RevokeExecutor, which deletes one key per id bound to
// the revoked key, and MigrateStore, which writes in batches of
// migrateBatch.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const (
	// etcdTxnAttempts bounds the runs of one update transaction.
	etcdTxnAttempts = 16
	// etcdRetryBase and etcdRetryMax bound the jittered wait before a
	// retry: a random time below base<<attempt, capped at max. Jitter
	// spreads the losers of a conflict apart, so the next round has one
	// winner rather than the same pile-up.
	etcdRetryBase = 2 * time.Millisecond
	etcdRetryMax  = 100 * time.Millisecond
	// etcdPageSize bounds the keys of one range read of a bucket scan.
	etcdPageSize = 500
	// etcdMarkerKey (in the meta bucket) marks a prefix as holding a
	// store; etcdStoreVersion is its value.
	etcdMarkerKey    = "store_version"
	etcdStoreVersion = "1"
)

// errTxnConflict: a transaction must run again on a fresh snapshot (its
// commit's compare failed, or its revision was compacted away).
var errTxnConflict = errors.New("etcd transaction conflict")

// etcdBackend is the store under one prefix of an etcd cluster.
type etcdBackend struct {
	cli     *clientv3.Client
	prefix  string // no trailing "/"
	timeout time.Duration
}

// NewEtcdStore is the token store under prefix (default
// DefaultEtcdPrefix) on the cluster cli talks to, each operation bounded
// by requestTimeout (default DefaultEtcdRequestTimeout). It marks the
// prefix as holding a store (as OpenStore creates its file). The client
// stays the caller's: the cluster code shares it, and Close leaves it
// open.
func NewEtcdStore(cli *clientv3.Client, prefix string, requestTimeout time.Duration) (*Store, error) {
	s, e, err := newEtcdStore(cli, prefix, requestTimeout)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	k := e.key(bucketMeta, []byte(etcdMarkerKey))
	_, err = cli.Txn(ctx).
		If(clientv3.Compare(clientv3.CreateRevision(k), "=", 0)).
		Then(clientv3.OpPut(k, etcdStoreVersion)).
		Commit()
	if err != nil {
		return nil, etcdError("marking the store", err)
	}
	return s, nil
}

// OpenExistingEtcdStore is NewEtcdStore for commands that only read or
// amend a store (token ls and revoke, executors revoke): it writes
// nothing, and a prefix that holds no store fails with ErrNoStore, so a
// mistyped prefix is reported rather than answered from an empty store.
func OpenExistingEtcdStore(cli *clientv3.Client, prefix string, requestTimeout time.Duration) (*Store, error) {
	s, e, err := newEtcdStore(cli, prefix, requestTimeout)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	resp, err := cli.Get(ctx, e.key(bucketMeta, []byte(etcdMarkerKey)), clientv3.WithCountOnly())
	if err != nil {
		return nil, etcdError("opening the store", err)
	}
	if resp.Count == 0 {
		return nil, fmt.Errorf("relay: %w under the etcd prefix %s (is --store right? relay serve, token create and relay migrate make it)", ErrNoStore, e.prefix)
	}
	return s, nil
}

func newEtcdStore(cli *clientv3.Client, prefix string, requestTimeout time.Duration) (*Store, *etcdBackend, error) {
	if cli == nil {
		return nil, nil, errors.New("relay: etcd token store: no client")
	}
	if requestTimeout < 0 {
		return nil, nil, errors.New("relay: etcd token store: negative request timeout")
	}
	prefix = strings.TrimRight(prefix, "/")
	if prefix == "" {
		prefix = DefaultEtcdPrefix
	}
	e := &etcdBackend{cli: cli, prefix: prefix, timeout: cmp.Or(requestTimeout, DefaultEtcdRequestTimeout)}
	return &Store{now: time.Now, b: e}, e, nil
}

func (e *etcdBackend) key(bucket, key []byte) string {
	return e.prefix + "/" + string(bucket) + "/" + string(key)
}

func (e *etcdBackend) bucketPrefix(bucket []byte) string {
	return e.prefix + "/" + string(bucket) + "/"
}

// close leaves the client open: it is the caller's (see NewEtcdStore).
func (e *etcdBackend) close() error { return nil }

func (e *etcdBackend) update(fn func(tx storeTx) error) error {
	return e.run(true, fn)
}

func (e *etcdBackend) view(fn func(tx storeTx) error) error {
	return e.run(false, fn)
}

// run runs fn in a transaction, again after a conflict, all within the
// request timeout.
func (e *etcdBackend) run(write bool, fn func(tx storeTx) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), e.timeout)
	defer cancel()
	for attempt := 1; ; attempt++ {
		tx := &etcdTx{e: e, ctx: ctx, write: write, reads: map[string]int64{}, ranges: map[string]bool{}, writes: map[string]etcdWrite{}}
		err := fn(tx)
		if err == nil && write && len(tx.writes) > 0 {
			err = tx.commit()
		}
		if !errors.Is(err, errTxnConflict) {
			return err
		}
		if attempt == etcdTxnAttempts {
			return fmt.Errorf("relay: token store on etcd: %w (%d attempts): %w", ErrStoreContention, attempt, ErrStoreUnavailable)
		}
		wait := min(etcdRetryBase<<attempt, etcdRetryMax)
		select {
		case <-time.After(rand.N(wait) + time.Millisecond):
		case <-ctx.Done():
			return fmt.Errorf("relay: token store on etcd: %w after %d conflicting attempts: %w: %w", ErrStoreContention, attempt, ErrStoreUnavailable, ctx.Err())
		}
	}
}

// etcdWrite is a buffered write: a put of val, or a deletion.
type etcdWrite struct {
	val []byte
	del bool
}

// etcdTx is one run of a transaction (see the file comment).
type etcdTx struct {
	e     *etcdBackend
	ctx   context.Context
	write bool
	rev   int64            // the snapshot's revision; 0 until the first read
	reads map[string]int64 // update: key read -> its mod revision at rev (0: absent)
	// ranges are the bucket prefixes an update scanned.
	ranges map[string]bool
	writes map[string]etcdWrite
}

// snapshot adds the snapshot's revision to a read's options, or, on the
// first read, leaves it to etcd (the newest) and notes the answer's.
func (t *etcdTx) opts(o ...clientv3.OpOption) []clientv3.OpOption {
	if t.rev > 0 {
		o = append(o, clientv3.WithRev(t.rev))
	}
	return o
}

func (t *etcdTx) fix(resp *clientv3.GetResponse) {
	if t.rev == 0 {
		t.rev = resp.Header.Revision
	}
}

func (t *etcdTx) get(bucket, key []byte) ([]byte, error) {
	k := t.e.key(bucket, key)
	if w, ok := t.writes[k]; ok {
		if w.del {
			return nil, nil
		}
		return w.val, nil
	}
	resp, err := t.e.cli.Get(t.ctx, k, t.opts()...)
	if err != nil {
		return nil, etcdError("reading", err)
	}
	t.fix(resp)
	var mod int64
	var val []byte
	if len(resp.Kvs) > 0 {
		mod, val = resp.Kvs[0].ModRevision, resp.Kvs[0].Value
		if val == nil {
			val = []byte{} // present, if empty: never answered as absent
		}
	}
	if t.write {
		if _, seen := t.reads[k]; !seen {
			t.reads[k] = mod
		}
	}
	return val, nil
}

func (t *etcdTx) put(bucket, key, value []byte) error {
	if !t.write {
		return errors.New("relay: token store: write in a read-only transaction")
	}
	t.writes[t.e.key(bucket, key)] = etcdWrite{val: bytes.Clone(value)}
	return nil
}

func (t *etcdTx) delete(bucket, key []byte) error {
	if !t.write {
		return errors.New("relay: token store: write in a read-only transaction")
	}
	t.writes[t.e.key(bucket, key)] = etcdWrite{del: true}
	return nil
}

// forEach scans the bucket at the snapshot's revision, page by page, and
// visits its keys with this transaction's writes applied.
func (t *etcdTx) forEach(bucket []byte, fn func(k, v []byte) error) error {
	p := t.e.bucketPrefix(bucket)
	end := clientv3.GetPrefixRangeEnd(p)
	kv := map[string][]byte{}
	from := p
	for {
		resp, err := t.e.cli.Get(t.ctx, from, t.opts(clientv3.WithRange(end), clientv3.WithLimit(etcdPageSize))...)
		if err != nil {
			return etcdError("scanning", err)
		}
		t.fix(resp)
		for _, x := range resp.Kvs {
			kv[string(x.Key)] = x.Value
		}
		if !resp.More || len(resp.Kvs) == 0 {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	for k, w := range t.writes {
		if !strings.HasPrefix(k, p) {
			continue
		}
		if w.del {
			delete(kv, k)
		} else {
			kv[k] = w.val
		}
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if t.write {
		t.ranges[p] = true
	}
	for _, k := range keys {
		if err := fn([]byte(k[len(p):]), kv[k]); err != nil {
			return err
		}
	}
	return nil
}

// commit applies the buffered writes if nothing read has changed since
// the snapshot; errTxnConflict if something has.
func (t *etcdTx) commit() error {
	cmps := make([]clientv3.Cmp, 0, len(t.reads)+len(t.ranges))
	for k, mod := range t.reads {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(k), "=", mod))
	}
	for p := range t.ranges {
		cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(p), "<", t.rev+1).WithPrefix())
	}
	ops := make([]clientv3.Op, 0, len(t.writes))
	for k, w := range t.writes {
		if w.del {
			ops = append(ops, clientv3.OpDelete(k))
		} else {
			ops = append(ops, clientv3.OpPut(k, string(w.val)))
		}
	}
	resp, err := t.e.cli.Txn(t.ctx).If(cmps...).Then(ops...).Commit()
	if err != nil {
		return etcdError("committing (the outcome is unknown if etcd applied it before failing)", err)
	}
	if !resp.Succeeded {
		return errTxnConflict
	}
	return nil
}

// etcdError wraps an error of the etcd client: ErrStoreUnavailable when
// etcd did not answer (in time, or at all, or without a leader),
// errTxnConflict when the snapshot's revision was compacted away (the
// transaction runs again on a new one), the error alone otherwise (a
// refusal such as permission denied or too many operations, which a retry
// would not cure).
func etcdError(what string, err error) error {
	if errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("relay: token store on etcd: %s: %w: %w", what, errTxnConflict, err)
	}
	if etcdUnavailable(err) {
		return fmt.Errorf("relay: token store on etcd: %s: %w: %w", what, ErrStoreUnavailable, err)
	}
	return fmt.Errorf("relay: token store on etcd: %s: %w", what, err)
}

func etcdUnavailable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return true
	}
	var code codes.Code
	var ee rpctypes.EtcdError
	if errors.As(err, &ee) {
		code = ee.Code()
	} else if st, ok := status.FromError(err); ok {
		code = st.Code()
	} else {
		// Not an answer of etcd's at all: the connection failed.
		return true
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Aborted, codes.ResourceExhausted:
		return true
	}
	return false
}

// migrateBatch bounds the writes of one MigrateStore transaction, under
// etcd's 128 operations (and compares) per Txn.
const migrateBatch = 100

// MigrateReport says what MigrateStore copied.
type MigrateReport struct {
	Tokens      int    // token records (with their hashes and use counts)
	TokenIDs    int    // token id entries
	Executors   int    // executor id bindings
	RevokedKeys int    // revoked executor keys
	Seq         uint64 // the revocation sequence number
	Records     int    // every record copied, all buckets
	Written     int    // records written so far (all of them on success)
	Txns        int    // transactions that wrote them
}

// MigrateStore copies every record of src (one snapshot) into dst, which
// must hold no tokens, bindings, revocations or revocation sequence
// number: otherwise it fails with ErrStoreNotEmpty and writes nothing. The
// check and the first batch are one transaction, so two migrations at
// once cannot both write. Each further batch writes only keys that are
// still absent (else it fails, leaving the earlier batches in place; the
// report's Written says how many records that is).
func MigrateStore(dst, src *Store) (MigrateReport, error) {
	type record struct{ bucket, key, val []byte }
	var recs []record
	var rep MigrateReport
	err := src.view(func(tx storeTx) error {
		recs, rep = nil, MigrateReport{}
		for _, b := range storeBuckets {
			err := tx.forEach(b, func(k, v []byte) error {
				if !isStoreData(b, k) {
					return nil
				}
				recs = append(recs, record{b, bytes.Clone(k), bytes.Clone(v)})
				return nil
			})
			if err != nil {
				return err
			}
		}
		var err error
		rep.Seq, err = revocationSeq(tx)
		return err
	})
	if err != nil {
		return MigrateReport{}, fmt.Errorf("relay: reading the source store: %w", err)
	}
	for _, r := range recs {
		switch {
		case bytes.Equal(r.bucket, bucketTokens):
			rep.Tokens++
		case bytes.Equal(r.bucket, bucketTokenIDs):
			rep.TokenIDs++
		case bytes.Equal(r.bucket, bucketExecutors):
			rep.Executors++
		case bytes.Equal(r.bucket, bucketRevoked):
			rep.RevokedKeys++
		}
	}
	rep.Records = len(recs)
	first := true
	for len(recs) > 0 || first {
		batch := recs[:min(len(recs), migrateBatch)]
		err := dst.update(func(tx storeTx) error {
			if first {
				for _, b := range storeBuckets {
					err := tx.forEach(b, func(k, _ []byte) error {
						if isStoreData(b, k) {
							return fmt.Errorf("%w (its bucket %s has keys)", ErrStoreNotEmpty, b)
						}
						return nil
					})
					if err != nil {
						return err
					}
				}
			} else {
				for _, r := range batch {
					v, err := tx.get(r.bucket, r.key)
					if err != nil {
						return err
					}
					if v != nil {
						return fmt.Errorf("relay: a %s record appeared in the destination during the migration", r.bucket)
					}
				}
			}
			for _, r := range batch {
				if err := tx.put(r.bucket, r.key, r.val); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			return rep, fmt.Errorf("relay: migrating the token store (%d of %d records written): %w", rep.Written, rep.Records, err)
		}
		first = false
		rep.Written += len(batch)
		if len(batch) > 0 {
			rep.Txns++
		}
		recs = recs[len(batch):]
	}
	return rep, nil
}

// isStoreData reports whether a record is store data (not the etcd
// backend's marker, which only says a store was opened there).
func isStoreData(bucket, key []byte) bool {
	return !bytes.Equal(bucket, bucketMeta) || string(key) != etcdMarkerKey
}
