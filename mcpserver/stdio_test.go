//go:build linux

package mcpserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/engine"
)

// stdioPeer is a raw JSON-RPC client on ServeStdio's pipes, for clients
// that misbehave in ways the SDK's client will not.
type stdioPeer struct {
	t    *testing.T
	in   *io.PipeWriter // to the server
	out  *bufio.Reader  // from the server
	outR *io.PipeReader
	done chan error
}

func newStdioPeer(t *testing.T, srv *Server) *stdioPeer {
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	p := &stdioPeer{t: t, in: inW, out: bufio.NewReader(outR), outR: outR, done: make(chan error, 1)}
	go func() { p.done <- srv.ServeStdio(context.Background(), inR, outW) }()
	t.Cleanup(func() { inW.Close(); outR.Close() })
	return p
}

func (p *stdioPeer) send(m map[string]any) error {
	m["jsonrpc"] = "2.0"
	b, _ := json.Marshal(m)
	_, err := p.in.Write(append(b, '\n'))
	return err
}

func (p *stdioPeer) recv() map[string]any {
	p.t.Helper()
	line, err := p.out.ReadBytes('\n')
	if err != nil {
		p.t.Fatalf("reading the server: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(line, &m); err != nil {
		p.t.Fatalf("%q: %v", line, err)
	}
	return m
}

func (p *stdioPeer) handshake() {
	p.t.Helper()
	p.send(map[string]any{"id": 1, "method": "initialize", "params": map[string]any{"protocolVersion": "2025-06-18", "capabilities": map[string]any{}, "clientInfo": map[string]any{"name": "raw", "version": "1"}}})
	if m := p.recv(); m["result"] == nil {
		p.t.Fatalf("initialize: %v", m)
	}
	p.send(map[string]any{"method": "notifications/initialized"})
}

// waitServed waits for ServeStdio to return.
func (p *stdioPeer) waitServed() error {
	p.t.Helper()
	select {
	case err := <-p.done:
		return err
	case <-time.After(testTimeout):
		p.t.Fatal("ServeStdio did not return after the client left")
		return nil
	}
}

func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// A client that asks for progress and then never reads: the command's
// output backs up to the executor (the server holds at most a message),
// and when the client goes away the command is terminated and the server
// returns.
func TestAClientThatNeverReadsHoldsNoMemoryAndLeavesNothingRunning(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	p := newStdioPeer(t, h.srv)
	p.handshake()
	token := fmt.Sprintf("never-reads-%d", time.Now().UnixNano())
	before := heapInUse()
	p.send(map[string]any{"id": 2, "method": "tools/call", "params": map[string]any{"name": "run", "arguments": map[string]any{"argv": []string{"yes", token}}, "_meta": map[string]any{"progressToken": "t"}}})
	for deadline := time.Now().Add(testTimeout); len(processesNamed(token)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	// yes writes as fast as it can for a while; nobody reads. The server
	// holds one progress message; behind it the output fills the client
	// package's event buffer for the process (client.EventBuffer events of
	// at most engine.MaxChunkBytes) and the executor's retention (in this
	// test process too) and the multiplexer's windows at both ends, then
	// the executor stops reading the command. (A heap profile of this
	// point shows nothing of mcpserver's: MCP_HEAP_PROFILE=FILE writes it.)
	time.Sleep(2 * time.Second)
	bound := int64(client.EventBuffer*engine.MaxChunkBytes) + engine.DefaultRetention().MaxBytes + 32<<20
	if grown := int64(heapInUse()) - int64(before); grown > bound {
		t.Fatalf("the heap grew %d MiB while the client did not read, over the %d MiB bound", grown>>20, bound>>20)
	}
	if f := os.Getenv("MCP_HEAP_PROFILE"); f != "" {
		fh, _ := os.Create(f)
		pprof.WriteHeapProfile(fh)
		fh.Close()
	}
	mid := heapInUse()
	time.Sleep(time.Second)
	if grown := int64(heapInUse()) - int64(mid); grown > 4<<20 {
		t.Fatalf("the heap still grows (%d MiB in a second) with the client not reading", grown>>20)
	}
	p.in.Close()
	p.outR.Close()
	if err := p.waitServed(); err != nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("ServeStdio: %v", err)
	}
	for deadline := time.Now().Add(testTimeout); len(processesNamed(token)) > 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%v still run after the client left", processesNamed(token))
		}
	}
}

// A message over MaxMessageBytes ends the session with an error; the
// server does not buffer it whole, and the next session works.
func TestAHugeMessageEndsTheSessionNotTheServer(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	p := newStdioPeer(t, h.srv)
	p.handshake()
	before := heapInUse()
	huge := strings.Repeat("a", MaxMessageBytes+1024)
	go p.send(map[string]any{"id": 2, "method": "tools/call", "params": map[string]any{"name": "write_file", "arguments": map[string]any{"path": "f", "content": huge}}})
	err := p.waitServed()
	if err == nil {
		t.Fatal("ServeStdio accepted a message over the bound")
	}
	if grown := int64(heapInUse()) - int64(before); grown > 3*MaxMessageBytes {
		t.Fatalf("the heap grew %d MiB for one refused message", grown>>20)
	}
	if _, err := os.Stat(h.ws + "/f"); err == nil {
		t.Fatal("the oversized write happened")
	}
	// Within the bound, a large argument is refused by the tool's own
	// limit, clearly, and the session goes on.
	var out runResult
	h.ok("run", map[string]any{"argv": []string{"echo", "fine"}}, &out)
	big := strings.Repeat("b", maxStdinBytes+1)
	h.fails("run", map[string]any{"argv": []string{"cat"}, "stdin": big}, "invalid_argument")
}
