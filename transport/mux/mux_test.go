package mux

import (
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"testing"
	"time"
)

// pair returns a client and server session over a real TCP connection on
// loopback.
func pair(t testing.TB, ccfg, scfg Config) (*Session, *Session) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		acc <- c
	}()
	cc, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	sc := <-acc
	c, err := Client(cc, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	s, err := Server(sc, scfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

func TestHalfClose(t *testing.T) {
	c, s := pair(t, Config{}, Config{})
	st, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrStreamClosed) {
		t.Fatalf("write after close: %v", err)
	}
	ss, err := s.AcceptStream()
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(ss)
	if err != nil || string(got) != "request" {
		t.Fatalf("server read %q, %v", got, err)
	}
	// The server's side is still open for writing after the client's FIN.
	if _, err := ss.Write([]byte("reply")); err != nil {
		t.Fatal(err)
	}
	ss.Close()
	got, err = io.ReadAll(st)
	if err != nil || string(got) != "reply" {
		t.Fatalf("client read %q, %v", got, err)
	}
	waitFor(t, func() bool { return c.NumStreams() == 0 && s.NumStreams() == 0 })
}

// waitFor polls a condition the test cannot wait on directly (streams are
// forgotten by another goroutine after both FINs); bounded at 5 s.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for i := 0; i < 5000; i++ {
		if cond() {
			return
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("condition not reached in 5 s")
}

func TestManyStreams(t *testing.T) {
	const streams, size = 64, 1 << 20
	// All 64 may be opened, and have sent a window of data each, before
	// the accept loop gets the CPU (a loaded CI machine): the server's
	// backlog holds them all, as the default's 4 MiB would not.
	c, s := pair(t, Config{}, Config{AcceptBacklogBytes: streams * InitialWindow})
	go func() {
		for {
			st, err := s.AcceptStream()
			if err != nil {
				return
			}
			go func() {
				io.Copy(st, st) // echo
				st.Close()
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, streams)
	for i := 0; i < streams; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			st, err := c.OpenStream()
			if err != nil {
				errs <- err
				return
			}
			want := make([]byte, size)
			rand.Read(want)
			go func() {
				st.Write(want)
				st.Close()
			}()
			got, err := io.ReadAll(st)
			if err != nil || !bytes.Equal(got, want) {
				errs <- fmt.Errorf("echo: %d of %d bytes, %v", len(got), size, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err, c.Err(), s.Err())
	}
	waitFor(t, func() bool { return c.NumStreams() == 0 && s.NumStreams() == 0 })
	if c.own.Used() != 0 || s.own.Used() != 0 {
		t.Fatalf("budgets not returned: %d, %d", c.own.Used(), s.own.Used())
	}
}

func TestSessionCloseEndsStreams(t *testing.T) {
	c, s := pair(t, Config{}, Config{})
	st, _ := c.OpenStream()
	ss, _ := s.AcceptStream()
	done := make(chan error, 1)
	go func() {
		_, err := ss.Read(make([]byte, 1))
		done <- err
	}()
	c.Close()
	if err := <-done; !errors.Is(err, ErrSessionShutdown) {
		t.Fatalf("read after peer closed: %v", err)
	}
	<-s.CloseChan()
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrSessionShutdown) {
		t.Fatalf("write after close: %v", err)
	}
	if _, err := s.OpenStream(); !errors.Is(err, ErrSessionShutdown) {
		t.Fatalf("open after close: %v", err)
	}
}

func TestDeadlines(t *testing.T) {
	c, s := pair(t, Config{}, Config{})
	st, _ := c.OpenStream()
	s.AcceptStream()
	st.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	// A deadline in the past ends a blocked Read at once.
	st.SetReadDeadline(time.Time{})
	done := make(chan error, 1)
	go func() {
		_, err := st.Read(make([]byte, 1))
		done <- err
	}()
	st.SetReadDeadline(time.Unix(1, 0))
	if err := <-done; !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read: %v", err)
	}
	var ne net.Error
	if _, err := st.Read(make([]byte, 1)); !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("not a net.Error timeout: %v", err)
	}
}

func TestGoAway(t *testing.T) {
	c, s := pair(t, Config{}, Config{})
	if err := s.GoAway(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return c.remoteGoAway.Load() })
	if _, err := c.OpenStream(); !errors.Is(err, ErrRemoteGoAway) {
		t.Fatalf("open after go-away: %v", err)
	}
}

func TestPing(t *testing.T) {
	c, _ := pair(t, Config{}, Config{})
	if _, err := c.Ping(); err != nil {
		t.Fatal(err)
	}
	if c.RTT() <= 0 {
		t.Fatal("no RTT sample")
	}
}

func TestBacklogAndMaxStreams(t *testing.T) {
	c, s := pair(t, Config{}, Config{AcceptBacklog: 2, MaxStreams: 3})
	open := func() *Stream {
		st, err := c.OpenStream()
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	open()
	open()
	// Two fill the backlog, the third is reset.
	if _, err := open().Read(make([]byte, 1)); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("third stream: %v", err)
	}
	s.AcceptStream()
	s.AcceptStream()
	// Room in the backlog again, and 3 open streams are within MaxStreams.
	open()
	if _, err := s.AcceptStream(); err != nil {
		t.Fatal(err)
	}
	// A fourth open stream is over MaxStreams.
	if _, err := open().Read(make([]byte, 1)); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("fourth open stream: %v", err)
	}
}

func TestStreamReset(t *testing.T) {
	c, s := pair(t, Config{}, Config{})
	st, _ := c.OpenStream()
	ss, _ := s.AcceptStream()
	st.Write([]byte("dropped"))
	ss.Reset()
	if _, err := st.Read(make([]byte, 1)); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("read after peer reset: %v", err)
	}
	if _, err := st.Write([]byte("x")); !errors.Is(err, ErrStreamReset) {
		t.Fatalf("write after peer reset: %v", err)
	}
	// The session carries on.
	st2, err := c.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	st2.Write([]byte("ok"))
	st2.Close()
	ss2, _ := s.AcceptStream()
	if b, _ := io.ReadAll(ss2); string(b) != "ok" {
		t.Fatalf("%q", b)
	}
}

func BenchmarkThroughput(b *testing.B) {
	c, s := pair(b, Config{}, Config{})
	go func() {
		st, _ := s.AcceptStream()
		io.Copy(io.Discard, st)
	}()
	st, _ := c.OpenStream()
	buf := make([]byte, 256<<10)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		st.Write(buf)
	}
}
