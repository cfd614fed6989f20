package executor

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

// Redteam: an on-path attacker copies the client's message 1 (early data:
// initialize + process/start) onto a connection of its own and lets the
// copy reach the executor first. The executor takes the copy's early data
// (a nonce it has not seen) and starts the command; the original then
// arrives, its early data is refused as a replay, and the client — as
// designed — re-sends the same requests in band. Unless the executor ties
// the in-band re-send to the refused early data, the command runs twice.
// (TLS 1.3's 0-RTT has the same hazard: RFC 8446 section 8 / E.5.)
func TestRedteamEarlyDataRaceRunsCommandTwice(t *testing.T) {
	key := mustKey(t)
	srv, ln := earlyServer(t, key)
	pl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	var held []net.Conn
	var mu sync.Mutex
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		// The first connection passes (it teaches the client the
		// executor's instance); the second, with early data, is attacked.
		c, err := pl.Accept()
		if err != nil {
			return
		}
		if u, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			mu.Lock()
			held = append(held, c, u)
			mu.Unlock()
			go io.Copy(u, c)
			go io.Copy(c, u)
		}
		if c, err = pl.Accept(); err != nil {
			return
		}
		mu.Lock()
		held = append(held, c)
		mu.Unlock()
		hdr := make([]byte, 6)
		if _, err := io.ReadFull(c, hdr); err != nil {
			return
		}
		body := make([]byte, binary.BigEndian.Uint16(hdr[4:6]))
		if _, err := io.ReadFull(c, body); err != nil {
			return
		}
		msg1 := append(hdr, body...)
		// The attacker's copy goes first; wait for its message 2.
		a, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		mu.Lock()
		held = append(held, a)
		mu.Unlock()
		a.Write(msg1)
		var two [2]byte
		a.SetReadDeadline(time.Now().Add(10 * time.Second))
		io.ReadFull(a, two[:])
		// Then the original.
		u, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		mu.Lock()
		held = append(held, u)
		mu.Unlock()
		u.Write(msg1)
		go io.Copy(u, c)
		io.Copy(c, u)
	}()

	out := filepath.Join(t.TempDir(), "runs")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg := earlyClient(t, key)
	learnInstance(t, ctx, "tcp://"+pl.Addr().String(), cfg)
	r, p, err := client.DialStart(ctx, "tcp://"+pl.Addr().String(), cfg, protocol.ExecParams{
		Argv: []string{"/bin/sh", "-c", "echo ran >> " + out}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		if !errors.Is(err, client.ErrEarlyDataReplayed) {
			t.Fatalf("DialStart: %v, want ErrEarlyDataReplayed", err)
		}
		// The attacker's copy ran the command (0-RTT cannot prevent
		// that); the client ran nothing more.
		deadline := time.Now().Add(5 * time.Second)
		for {
			b, _ := os.ReadFile(out)
			if n := strings.Count(string(b), "ran\n"); n == 1 {
				break
			} else if n > 1 || time.Now().After(deadline) {
				t.Fatalf("the command ran %d times", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if srv.early.taken.Load() != 1 {
			t.Fatalf("early data taken %d times, want 1", srv.early.taken.Load())
		}
		return
	}
	defer r.Close()
	p.Wait(ctx)
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		b, _ := os.ReadFile(out)
		if n := strings.Count(string(b), "ran\n"); n >= 2 {
			t.Fatalf("one DialStart ran the command %d times (raced copy of its early data + the client's in-band re-send)", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
