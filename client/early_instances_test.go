package client

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/transport"
)

func testInstance(t *testing.T) transport.EarlyInstance {
	i, err := transport.NewEarlyInstance()
	if err != nil {
		t.Fatal(err)
	}
	return i
}

func testExecutorKey(t *testing.T) identity.PublicKey {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k.PublicKey()
}

// The instances file records the last instance per address and key, is
// shared by every client of one known executors file (a new process reads
// what an earlier one learned), forgets an executor that names none, and
// drops the line of an address whose key changed.
func TestEarlyInstancesRecordTheLastInstancePerExecutor(t *testing.T) {
	known := filepath.Join(t.TempDir(), "cfg", "known_executors")
	s := openEarlyInstances(known)
	k1, k2 := testExecutorKey(t), testExecutorKey(t)
	i1, i2 := testInstance(t), testInstance(t)
	if _, ok := s.lookup("tcp://a:1", k1); ok {
		t.Fatal("an empty record named an instance")
	}
	s.learn("tcp://a:1", k1, transport.EarlyReply{HasInstance: true, Instance: i1})
	s.learn("tcp://b:1", k1, transport.EarlyReply{HasInstance: true, Instance: i2})
	if got, ok := openEarlyInstances(known).lookup("tcp://a:1", k1); !ok || got != i1 {
		t.Fatalf("another client of the file: %v %v", got, ok)
	}
	if _, ok := s.lookup("tcp://a:1", k2); ok {
		t.Fatal("an instance named for another key")
	}
	fi, err := os.Stat(instancesFileFor(known))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("instances file: %v %v", fi, err)
	}
	s.learn("tcp://a:1", k1, transport.EarlyReply{HasInstance: true, Instance: i2}) // restarted
	if got, _ := s.lookup("tcp://a:1", k1); got != i2 {
		t.Fatal("the new instance was not recorded")
	}
	s.learn("tcp://a:1", k2, transport.EarlyReply{HasInstance: true, Instance: i1}) // a new key there
	if _, ok := s.lookup("tcp://a:1", k1); ok {
		t.Fatal("the line of the address's former key stayed")
	}
	s.learn("tcp://b:1", k1, transport.EarlyReply{}) // an older executor now: no instance
	if _, ok := s.lookup("tcp://b:1", k1); ok {
		t.Fatal("an executor naming no instance is still recorded")
	}
	b, _ := os.ReadFile(instancesFileFor(known))
	if n := strings.Count(string(b), "tcp://"); n != 1 {
		t.Fatalf("file holds %d lines:\n%s", n, b)
	}
	// Junk in the file is skipped; addresses that cannot be written back
	// as one field are never recorded.
	os.WriteFile(instancesFileFor(known), append(b, "garbage\ntcp://c:1 x notbase64!\n"...), 0o600)
	if got, ok := s.lookup("tcp://a:1", k2); !ok || got != i1 {
		t.Fatal("a good line was lost to junk around it")
	}
	s.learn("tcp://d:1 x", k1, transport.EarlyReply{HasInstance: true, Instance: i1})
	if _, ok := s.lookup("tcp://d:1", k1); ok {
		t.Fatal("an address with a space was recorded")
	}
}

// The file keeps at most maxInstanceEntries executors, the most recently
// learned.
func TestEarlyInstancesAreBounded(t *testing.T) {
	s := openEarlyInstances(filepath.Join(t.TempDir(), "known"))
	k := testExecutorKey(t)
	i := testInstance(t)
	for n := range maxInstanceEntries + 10 {
		s.learn("tcp://h:9"+strconv.Itoa(n), k, transport.EarlyReply{HasInstance: true, Instance: i})
	}
	if got := len(s.read()); got != maxInstanceEntries {
		t.Fatalf("%d entries", got)
	}
	if _, ok := s.lookup("tcp://h:9"+strconv.Itoa(0), k); ok {
		t.Fatal("the oldest entry was kept")
	}
	if _, ok := s.lookup("tcp://h:9"+strconv.Itoa(maxInstanceEntries+9), k); !ok {
		t.Fatal("the newest entry was dropped")
	}
}
