package identity

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"unicode"
)

// ErrNotPinned is returned by KnownExecutors.Check when the address has no
// pinned key yet (first contact: the caller decides whether to Pin).
var ErrNotPinned = errors.New("identity: executor address has no pinned key")

// ErrConflictingPins is wrapped by the error OpenKnownExecutors and Pin
// return when the file pins two different keys for one address.
var ErrConflictingPins = errors.New("conflicting pins")

// KeyMismatchError is returned when an executor presents a key other than
// the one pinned for its address: either the executor's key really
// changed, or someone is impersonating it. Only the user can resolve it,
// by removing the old pin from File.
type KeyMismatchError struct {
	Addr      string    // the address as dialled
	Pinned    PublicKey // the key on record
	Presented PublicKey // the key the peer presented
	File      string    // the known-executors file holding the pin ("" if none)
}

func (e *KeyMismatchError) Error() string {
	where := "the known executors file"
	if e.File != "" {
		where = e.File
	}
	return fmt.Sprintf("executor key for %s changed: pinned %s, presented %s; if this change is expected, remove the line for %s from %s",
		e.Addr, e.Pinned.Fingerprint(), e.Presented.Fingerprint(), e.Addr, where)
}

// KnownExecutors maps addresses to pinned executor keys (trust on first
// use), backed by a file like ssh's known_hosts. Addresses are compared
// exactly as written: "tcp://host:7000" and "tcp://HOST:7000" are
// different pins. It is safe for concurrent use, and Pin is safe against
// other processes pinning in the same file at the same time.
//
// File format, one pin per line:
//
//	# comment lines and blank lines are ignored
//	<address> <fingerprint> [free-form comment]
//
// An address may appear on several lines with the same key; two different
// keys for one address make the file invalid (ErrConflictingPins). The
// file must not be writable by group or others.
type KnownExecutors struct {
	path string
	mu   sync.Mutex
	pins map[string]pin
}

// pin is a pinned key and the line it was read from (0 if added by Pin).
type pin struct {
	key  PublicKey
	line int
}

// OpenKnownExecutors reads the known-executors file at path. A missing
// file is an empty set; it is created by the first Pin.
func OpenKnownExecutors(path string) (*KnownExecutors, error) {
	k := &KnownExecutors{path: path, pins: map[string]pin{}}
	data, err := readTrustFile("known executors file", path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return k, nil
		}
		return nil, err
	}
	pins, err := parseKnownExecutors(path, data)
	if err != nil {
		return nil, err
	}
	k.pins = pins
	return k, nil
}

// Path returns the backing file.
func (k *KnownExecutors) Path() string { return k.path }

// Lookup returns the key pinned for addr.
func (k *KnownExecutors) Lookup(addr string) (PublicKey, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	p, ok := k.pins[addr]
	return p.key, ok
}

// Check verifies the key an executor at addr presented. It returns nil if
// it matches the pin, a *KeyMismatchError if it does not, and ErrNotPinned
// if addr has no pin.
func (k *KnownExecutors) Check(addr string, presented PublicKey) error {
	pinned, ok := k.Lookup(addr)
	if !ok {
		return ErrNotPinned
	}
	if pinned != presented {
		return &KeyMismatchError{Addr: addr, Pinned: pinned, Presented: presented, File: k.path}
	}
	return nil
}

// Pin records key for addr by appending a line to the file (creating it
// with mode 0600, and its directory with 0700, if needed). The file is
// locked and re-read first, so a pin written meanwhile by another process
// is honoured: pinning the key already on record is a no-op, and pinning a
// different one returns a *KeyMismatchError and writes nothing. The line
// is appended with a single O_APPEND write and synced.
//
// addr must be non-empty and contain no white space or control
// characters, and must not start with '#'.
func (k *KnownExecutors) Pin(addr string, key PublicKey) error {
	if err := validAddr(addr); err != nil {
		return err
	}
	if key.IsZero() {
		return errors.New("identity: refusing to pin the zero key")
	}
	k.mu.Lock()
	defer k.mu.Unlock()

	if err := os.MkdirAll(filepath.Dir(k.path), 0o700); err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	f, err := os.OpenFile(k.path, os.O_RDWR|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	defer f.Close()
	unlock, err := lockFile(f)
	if err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	defer unlock()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	if err := checkTrustFileInfo("known executors file", k.path, fi); err != nil {
		return err
	}
	if fi.Size() == 0 {
		// New (or empty): private to the user, as mode 0600 makes it on Unix.
		if err := restrictToUser(f); err != nil {
			return fmt.Errorf("identity: known executors file: %w", err)
		}
	}
	if err := checkTrustFileACL(f, "known executors file", k.path); err != nil {
		return err
	}
	data, err := io.ReadAll(f) // the offset starts at 0; writes still go to the end
	if err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	pins, err := parseKnownExecutors(k.path, data)
	if err != nil {
		return err
	}
	k.pins = pins
	if p, ok := pins[addr]; ok {
		if p.key == key {
			return nil
		}
		return &KeyMismatchError{Addr: addr, Pinned: p.key, Presented: key, File: k.path}
	}

	line := addr + " " + key.Fingerprint() + "\n"
	if len(data) > 0 && data[len(data)-1] != '\n' {
		line = "\n" + line // never glue onto a line left unterminated
	}
	if _, err := f.Write([]byte(line)); err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("identity: known executors file: %w", err)
	}
	k.pins[addr] = pin{key: key}
	return nil
}

// validAddr checks that addr can be written as the first field of a line
// and read back unchanged.
func validAddr(addr string) error {
	switch {
	case addr == "":
		return errors.New("identity: empty executor address")
	case addr[0] == '#':
		return fmt.Errorf("identity: executor address %s starts with '#'", quoteShort(addr))
	case strings.ContainsFunc(addr, func(r rune) bool {
		return unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar
	}):
		return fmt.Errorf("identity: executor address %s contains white space, control characters or invalid UTF-8", quoteShort(addr))
	}
	return nil
}

// parseKnownExecutors parses known-executors contents; name is used in
// errors.
func parseKnownExecutors(name string, data []byte) (map[string]pin, error) {
	pins := make(map[string]pin)
	err := forEachLine(data, func(n int, line string) error {
		addr, rest := splitField(line)
		fp, _ := splitField(rest)
		if fp == "" {
			return fmt.Errorf("identity: %s:%d: want \"<address> <fingerprint>\", got %s", name, n, quoteShort(line))
		}
		if err := validAddr(addr); err != nil {
			return fmt.Errorf("identity: %s:%d: %s", name, n, strings.TrimPrefix(err.Error(), "identity: "))
		}
		key, err := ParsePublicKey(fp)
		if err != nil {
			return fmt.Errorf("identity: %s:%d: %s", name, n, strings.TrimPrefix(err.Error(), "identity: "))
		}
		if prev, ok := pins[addr]; ok {
			if prev.key != key {
				return fmt.Errorf("identity: %s: lines %d and %d pin different keys for %s (%s and %s); remove the wrong line (%w)",
					name, prev.line, n, addr, prev.key.Fingerprint(), key.Fingerprint(), ErrConflictingPins)
			}
			return nil
		}
		pins[addr] = pin{key: key, line: n}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return pins, nil
}
