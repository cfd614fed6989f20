package relay

// The bbolt backend of the token store: one file, opened per transaction.
//
// bbolt takes an exclusive flock on its file for as long as it is open,
// and the relay and the `outpost token` CLI share the file, so the store
// never keeps it open: every transaction opens the file (waiting at most
// storeLockTimeout for the lock, then failing with ErrStoreUnavailable),
// runs, and closes it. Transactions are serial, so update runs its
// function exactly once.

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

const (
	storeLockTimeout = 2 * time.Second
	storeFileMode    = 0o600
	storeDirMode     = 0o700
)

// boltBackend is the store in one bbolt file.
type boltBackend struct {
	path string

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
	b := &boltBackend{path: path}
	err := b.updateBolt(func(tx *bolt.Tx) error {
		for _, name := range storeBuckets {
			if _, err := tx.CreateBucketIfNotExists(name); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return &Store{path: path, now: time.Now, b: b}, nil
}

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

func (b *boltBackend) open(readOnly bool) (*bolt.DB, error) {
	db, err := bolt.Open(b.path, storeFileMode, &bolt.Options{Timeout: storeLockTimeout, ReadOnly: readOnly})
	if err != nil {
		if errors.Is(err, bolt.ErrTimeout) {
			// Both sentinels: callers that know bbolt's keep working.
			return nil, fmt.Errorf("relay: token store %s is locked by another user: %w: %w", b.path, ErrStoreUnavailable, err)
		}
		return nil, fmt.Errorf("relay: opening token store %s: %w", b.path, err)
	}
	return db, nil
}

func (b *boltBackend) updateBolt(fn func(tx *bolt.Tx) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	db, err := b.open(false)
	if err != nil {
		return err
	}
	err = db.Update(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay: closing token store: %w", cerr)
	}
	return err
}

func (b *boltBackend) viewBolt(fn func(tx *bolt.Tx) error) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	db, err := b.open(true)
	if err != nil {
		return err
	}
	err = db.View(fn)
	if cerr := db.Close(); err == nil && cerr != nil {
		err = fmt.Errorf("relay: closing token store: %w", cerr)
	}
	return err
}

func (b *boltBackend) update(fn func(tx storeTx) error) error {
	return b.updateBolt(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

func (b *boltBackend) view(fn func(tx storeTx) error) error {
	return b.viewBolt(func(tx *bolt.Tx) error { return fn(boltTx{tx}) })
}

// close: nothing is open between transactions.
func (b *boltBackend) close() error { return nil }

// boltTx is a storeTx on a bbolt transaction.
type boltTx struct{ tx *bolt.Tx }

func (t boltTx) bucket(name []byte) (*bolt.Bucket, error) {
	b := t.tx.Bucket(name)
	if b == nil {
		return nil, fmt.Errorf("relay: token store is missing bucket %q", name)
	}
	return b, nil
}

func (t boltTx) get(bucket, key []byte) ([]byte, error) {
	b, err := t.bucket(bucket)
	if err != nil {
		return nil, err
	}
	return b.Get(key), nil
}

func (t boltTx) put(bucket, key, value []byte) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return b.Put(key, value)
}

func (t boltTx) delete(bucket, key []byte) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return b.Delete(key)
}

func (t boltTx) forEach(bucket []byte, fn func(k, v []byte) error) error {
	b, err := t.bucket(bucket)
	if err != nil {
		return err
	}
	return b.ForEach(fn)
}
