//go:build linux

package netem

import (
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// TestLinkRTT builds two namespaces joined by a link with 10 ms each way
// and checks that a TCP ping-pong takes about 20 ms, then that closing
// everything leaves no namespace behind; with and without GSO.
func TestLinkRTT(t *testing.T) {
	if err := Available(); err != nil {
		testdeps.Missing(t, "netns", "skipping the namespace test: it %v", err)
	}
	RemoveStale("owantest-")
	for _, gso := range []bool{false, true} {
		t.Run(fmt.Sprintf("gso=%v", gso), func(t *testing.T) { testLinkRTT(t, gso) })
	}
}

func testLinkRTT(t *testing.T, gso bool) {
	pfx := fmt.Sprintf("owantest-%d-gso%v-", os.Getpid(), gso)
	a, err := CreateNS(pfx + "a")
	if err != nil {
		t.Fatal(err)
	}
	defer a.Delete()
	b, err := CreateNS(pfx + "b")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Delete()
	link, err := NewLink("a-b", Side{a, "wan0", "10.99.0.1/30"}, Side{b, "wan0", "10.99.0.2/30"}, 1500, gso,
		Config{Delay: 10 * time.Millisecond, Rate: 100e6, Queue: BDPQueue(100e6, 20*time.Millisecond, 1.5)}, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer link.Close()

	var ln net.Listener
	if err := b.Do(func() (err error) { ln, err = net.Listen("tcp", "10.99.0.2:7000"); return }); err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c) // echo
	}()
	var c net.Conn
	if err := a.Do(func() (err error) { c, err = net.DialTimeout("tcp", "10.99.0.2:7000", 5*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var rtts []time.Duration
	buf := make([]byte, 1)
	for range 20 {
		t0 := time.Now()
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(c, buf); err != nil {
			t.Fatal(err)
		}
		rtts = append(rtts, time.Since(t0))
	}
	slices.Sort(rtts)
	p50 := rtts[len(rtts)/2]
	t.Logf("ping-pong RTT over a 10+10 ms link: min %v, p50 %v, max %v", rtts[0], p50, rtts[len(rtts)-1])
	if p50 < 20*time.Millisecond || p50 > 23*time.Millisecond {
		t.Errorf("p50 RTT %v, want 20 ms (+3 ms for scheduling on a busy machine)", p50)
	}
	if rtts[0] < 20*time.Millisecond {
		t.Errorf("a ping-pong took %v, under the emulated 20 ms", rtts[0])
	}
	// A bulk transfer crosses too (with GSO, in packets above the MTU),
	// whole, though the drop-tail queue drops some of slow start's burst.
	got := make(chan int64, 1)
	go func() {
		c2, err := ln.Accept()
		if err != nil {
			got <- -1
			return
		}
		defer c2.Close()
		n, _ := io.Copy(io.Discard, c2)
		got <- n
	}()
	var c2 net.Conn
	if err := a.Do(func() (err error) { c2, err = net.DialTimeout("tcp", "10.99.0.2:7000", 5*time.Second); return }); err != nil {
		t.Fatal(err)
	}
	c2.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c2.Write(make([]byte, 4<<20)); err != nil {
		t.Fatalf("4 MiB over the link: %v", err)
	}
	c2.Close()
	select {
	case n := <-got:
		if n != 4<<20 {
			t.Fatalf("received %d of 4 MiB", n)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("4 MiB at 100 Mbit/s not through in 5 s")
	}
	st := link.AB.Stats()
	t.Logf("a→b: %+v", st)
	if st.Packets == 0 || st.Lost != 0 || st.Overflow != 0 || st.WriteErrors != 0 {
		t.Errorf("a→b stats %+v", st)
	}
	if avg := st.Bytes / st.Packets; gso != (avg > 1500) {
		t.Errorf("gso %v: %d bytes per packet on average", gso, avg)
	}

	c.Close()
	ln.Close()
	link.Close()
	for _, ns := range []*NS{a, b} {
		if err := ns.Delete(); err != nil {
			t.Error(err)
		}
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if len(e.Name()) >= len(pfx) && e.Name()[:len(pfx)] == pfx {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}

func TestRemoveStale(t *testing.T) {
	if err := Available(); err != nil {
		testdeps.Missing(t, "netns", "skipping the namespace test: it %v", err)
	}
	// A namespace named for a pid that cannot be running (above pid_max).
	name := "owantest-99999999-stale"
	if _, err := CreateNS(name); err != nil {
		t.Fatal(err)
	}
	removed, err := RemoveStale("owantest-")
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(removed, name) {
		t.Fatalf("removed %v, not %s", removed, name)
	}
	if _, err := os.Stat(netnsDir + "/" + name); !os.IsNotExist(err) {
		t.Fatalf("%s still exists", name)
	}
}
