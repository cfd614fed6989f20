package identity

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
)

// AllowList is a set of public keys read from a file: the initiators a
// responder accepts. It is safe for concurrent use; Reload swaps in the
// new contents atomically, so a reader sees either the old set or the new
// one, never a mixture.
//
// File format, one entry per line:
//
//	# comment lines and blank lines are ignored
//	<fingerprint>                    a key
//	<fingerprint> laptop of alice    a key and a free-form comment
//
// The same key may appear more than once. The file must not be writable by
// group or others.
type AllowList struct {
	path     string
	reloadMu sync.Mutex // serializes Reload, so the last to read stores last
	set      atomic.Pointer[allowSet]
}

type allowSet struct {
	keys map[PublicKey]struct{}
}

// LoadAllowList reads the allow-list file at path. A malformed line is an
// error naming the file and the line number.
func LoadAllowList(path string) (*AllowList, error) {
	a := &AllowList{path: path}
	if err := a.Reload(); err != nil {
		return nil, err
	}
	return a, nil
}

// NewAllowList returns an allow-list holding keys and backed by no file
// (Reload fails), for tests and programmatic configuration.
func NewAllowList(keys ...PublicKey) *AllowList {
	s := &allowSet{keys: make(map[PublicKey]struct{}, len(keys))}
	for _, k := range keys {
		s.keys[k] = struct{}{}
	}
	a := &AllowList{}
	a.set.Store(s)
	return a
}

// Reload re-reads the file. On error the previous contents stay in force.
func (a *AllowList) Reload() error {
	if a.path == "" {
		return errors.New("identity: allow-list has no file to reload")
	}
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	data, err := readTrustFile("allow-list", a.path)
	if err != nil {
		return err
	}
	keys, err := parseAllowList(a.path, data)
	if err != nil {
		return err
	}
	a.set.Store(&allowSet{keys: keys})
	return nil
}

// Allowed reports whether key is on the list.
func (a *AllowList) Allowed(key PublicKey) bool {
	s := a.set.Load()
	if s == nil {
		return false
	}
	_, ok := s.keys[key]
	return ok
}

// Len returns the number of distinct keys on the list.
func (a *AllowList) Len() int {
	s := a.set.Load()
	if s == nil {
		return 0
	}
	return len(s.keys)
}

// Keys returns the keys on the list, sorted by fingerprint.
func (a *AllowList) Keys() []PublicKey {
	s := a.set.Load()
	if s == nil {
		return nil
	}
	out := make([]PublicKey, 0, len(s.keys))
	for k := range s.keys {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Fingerprint() < out[j].Fingerprint() })
	return out
}

// Path returns the file the list was loaded from ("" for NewAllowList).
func (a *AllowList) Path() string { return a.path }

// parseAllowList parses allow-list contents; name is used in errors.
func parseAllowList(name string, data []byte) (map[PublicKey]struct{}, error) {
	keys := make(map[PublicKey]struct{})
	err := forEachLine(data, func(n int, line string) error {
		field, _ := splitField(line)
		k, err := ParsePublicKey(field)
		if err != nil {
			return fmt.Errorf("identity: %s:%d: %s", name, n, strings.TrimPrefix(err.Error(), "identity: "))
		}
		keys[k] = struct{}{}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}
