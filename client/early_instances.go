package client

// The client's record of executor instances, for early data (PROTOCOL.md
// section 2.7). An executor takes early data only if it names the
// executor's current instance — a random id each executor process makes at
// start and tells every client in its IK message 2 — so that a message 1
// recorded on its way to one process is worthless to another holding the
// same key (a copied executor.key, a restart). The client keeps the last
// instance each executor named, per address and key, in a file beside its
// known executors file (<KnownExecutors>.instances), so that a new client
// process (one `outpost exec` each) still starts its first command in
// message 1. Without a record it sends no early data: the handshake
// teaches it the instance for the next connection.
//
// The file is a cache, not a trust store: a wrong or stale line costs one
// round trip (the executor refuses the early data and the client sends
// the same bytes in band), never a second run, since the executor decides.
// So errors reading or writing it are ignored, and concurrent writers
// (two clients at once) may lose each other's update: the last rename
// wins. Format, one line per executor:
//
//	<address> <executor key fingerprint> <instance, base64url>

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/transport"
)

// Bounds of the instances file.
const (
	maxInstanceEntries = 1024      // executors remembered; the least recently learned go first
	maxInstancesFile   = 512 << 10 // bytes read from it at most
)

// earlyInstances is the instances file of one known executors file.
type earlyInstances struct {
	path string
	mu   sync.Mutex // this process's writers, one at a time
}

// instancesFileFor names the instances file beside a known executors file.
func instancesFileFor(knownExecutors string) string { return knownExecutors + ".instances" }

func openEarlyInstances(knownExecutors string) *earlyInstances {
	return &earlyInstances{path: instancesFileFor(knownExecutors)}
}

type instanceEntry struct {
	addr, key string // key: the executor's fingerprint
	inst      transport.EarlyInstance
}

// read parses the file; a missing or unreadable file is empty, and a line
// that does not parse is skipped.
func (s *earlyInstances) read() []instanceEntry {
	f, err := os.Open(s.path)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []instanceEntry
	sc := bufio.NewScanner(io.LimitReader(f, maxInstancesFile))
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) != 3 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		inst, err := transport.ParseEarlyInstance(fields[2])
		if err != nil {
			continue
		}
		out = append(out, instanceEntry{addr: fields[0], key: fields[1], inst: inst})
	}
	return out
}

// lookup is the instance last learned from the executor at addr with key.
func (s *earlyInstances) lookup(addr string, key identity.PublicKey) (transport.EarlyInstance, bool) {
	if s == nil {
		return transport.EarlyInstance{}, false
	}
	fp := key.Fingerprint()
	var inst transport.EarlyInstance
	found := false
	for _, e := range s.read() {
		if e.addr == addr && e.key == fp {
			inst, found = e.inst, true // the last line wins
		}
	}
	return inst, found
}

// learn records what message 2 of a handshake with the executor at addr
// (key) said: its instance, or — from an executor that names none — that
// there is nothing to name. The file is written only when that changes
// what it says.
func (s *earlyInstances) learn(addr string, key identity.PublicKey, r transport.EarlyReply) {
	if s == nil || addr == "" || strings.ContainsFunc(addr, isSpaceOrControl) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	fp := key.Fingerprint()
	entries := s.read()
	kept := entries[:0]
	var found, same, stale bool
	for _, e := range entries {
		switch {
		case e.addr == addr && e.key == fp:
			found, same = true, e.inst == r.Instance // the last line wins, as in lookup
		case e.addr == addr:
			stale = true // a line for the address's former key: gone with it
		default:
			kept = append(kept, e)
		}
	}
	if !stale && (r.HasInstance && found && same || !r.HasInstance && !found) {
		return // the file says so already
	}
	if r.HasInstance {
		kept = append(kept, instanceEntry{addr: addr, key: fp, inst: r.Instance})
	}
	if len(kept) > maxInstanceEntries {
		kept = kept[len(kept)-maxInstanceEntries:]
	}
	_ = s.write(kept)
}

func isSpaceOrControl(r rune) bool { return r <= ' ' || r == 0x7f }

// write replaces the file atomically (a temporary file renamed over it),
// mode 0600.
func (s *earlyInstances) write(entries []instanceEntry) error {
	var b bytes.Buffer
	b.WriteString("# outpost: executor instances for early data (a cache: safe to delete)\n")
	for _, e := range entries {
		b.WriteString(e.addr + " " + e.key + " " + e.inst.String() + "\n")
	}
	if b.Len() > maxInstancesFile {
		return errors.New("client: instances file over its bound")
	}
	dir := filepath.Dir(s.path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(s.path)+".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after the rename, a no-op
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b.Bytes()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), s.path)
}

// earlySlot is where one dialer's connections find and leave the instance
// of their executor: its address (as pinned: the URL without fragment) and
// the key pinned for it, by Config.Pin or the URL, or else in the known
// executors file at the time of each connection.
type earlySlot struct {
	store  *earlyInstances
	addr   string
	pinned *identity.PublicKey
	known  *identity.KnownExecutors
}

// lookup is the instance to name in early data; false: send none.
func (e earlySlot) lookup() (transport.EarlyInstance, bool) {
	key := e.pinned
	if key == nil && e.known != nil {
		if k, ok := e.known.Lookup(e.addr); ok {
			key = &k
		}
	}
	if key == nil || e.store == nil {
		return transport.EarlyInstance{}, false // XX: no early data anyway
	}
	return e.store.lookup(e.addr, *key)
}

// learn records message 2's answer of a handshake with peer.
func (e earlySlot) learn(peer []byte, r transport.EarlyReply) {
	if e.store == nil || len(peer) != len(identity.PublicKey{}) {
		return
	}
	var k identity.PublicKey
	copy(k[:], peer)
	e.store.learn(e.addr, k, r)
}
