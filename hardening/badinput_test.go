//go:build linux

package hardening

import (
	"bytes"
	"context"
	"encoding/json"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/transport"
)

var env0 = map[string]string{"PATH": "/usr/bin:/bin"}

// fleet is the set of daemons the suite attacks.
type fleet struct {
	relay, joined, tcp, ws *daemon
	clientToken            string
}

func startFleet(t *testing.T) *fleet {
	dir := t.TempDir()
	// A short handshake timeout makes slowloris cases quick; a high
	// failed-handshake limit keeps 127.0.0.1 from being blocked by our own
	// garbage (that limit has its own test in relay/).
	f := &fleet{}
	f.relay = startDaemon(t, "relay", true, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "relay"),
		"--handshake-timeout", "1s", "--max-failed-handshakes", "100000", "--drain-timeout", "2s")
	joinTok := tokenCreate(t, filepath.Join(dir, "relay"), "--join")
	f.clientToken = tokenCreate(t, filepath.Join(dir, "relay"), "--client")
	limits := []string{"--detached-ttl", "300ms", "--closed-retention", "300ms", "--terminate-grace", "500ms"}
	f.joined = startDaemon(t, "joined executor", false, append([]string{"executor", "join", "--relay", f.relay.url, "--token", joinTok, "--id", "bad-1",
		"--state-dir", filepath.Join(dir, "joined")}, limits...)...)
	f.tcp = startDaemon(t, "tcp executor", true, append([]string{"executor", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "tcp"),
		"--handshake-timeout", "1s", "--max-failed-handshakes", "100000"}, limits...)...)
	f.ws = startDaemon(t, "ws executor", true, append([]string{"executor", "serve", "--listen", "ws://127.0.0.1:0"}, limits...)...)
	// Warm every path once so lazily started goroutines are in the baseline.
	f.runEverywhere(t)
	return f
}

func (f *fleet) all() []*daemon { return []*daemon{f.relay, f.joined, f.tcp, f.ws} }

// runEverywhere runs a real command through the relay, tcp and ws, and
// closes the clients.
func (f *fleet) runEverywhere(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		env, err := client.Dial(ctxT(t, 10*time.Second), f.relay.url, client.Config{Executor: "bad-1", Token: f.clientToken,
			KnownExecutors: filepath.Join(t.TempDir(), "known"), NoResume: true})
		if err == nil {
			mustEcho(t, env, "via relay")
			env.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("through the relay: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // still joining
	}
	for _, url := range []string{f.tcp.url, f.ws.url} {
		env := dialClient(t, url, client.Config{NoResume: true})
		mustEcho(t, env, "direct")
		env.Close()
	}
}

func mustEcho(t *testing.T, env client.Environment, s string) {
	t.Helper()
	out, err := client.Command(env, "/bin/echo", s).Output()
	if err != nil || string(out) != s+"\n" {
		t.Fatalf("echo %q: %q %v", s, out, err)
	}
}

// TestBadInputLeavesDaemonsServingAndLeakFree throws each kind of hostile
// input at running processes and checks, after each, that they answer
// /readyz and are back at their goroutine, fd and child-process baseline.
func TestBadInputLeavesDaemonsServingAndLeakFree(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four daemons; skipped with -short")
	}
	f := startFleet(t)
	base := baseline(t, f.all()...)
	t.Logf("baseline: %+v", base)
	cases := []struct {
		name string
		run  func(t *testing.T, f *fleet)
	}{
		{"garbage bytes", garbageBytes},
		{"truncated handshakes", truncatedHandshakes},
		{"slow handshakes", slowHandshakes},
		{"oversized length prefixes", oversizedLengthPrefixes},
		{"truncated frames", truncatedFrames},
		{"unknown methods", unknownMethods},
		{"invalid UTF-8", invalidUTF8},
		{"NUL bytes in paths", nulInPaths},
		{"huge argv and env", hugeArgvAndEnv},
		{"stream floods", streamFloods},
		{"connection floods", connectionFloods},
		{"hostile file requests", hostileFileRequests},
		{"vanishing clients", vanishingClients},
	}
	for _, c := range cases {
		// Settle after the case's own cleanups have closed its connections.
		if !t.Run(c.name, func(t *testing.T) { c.run(t, f) }) {
			continue
		}
		t.Run(c.name+"/recovered", func(t *testing.T) { settle(t, base) })
	}
	// Still doing real work afterwards.
	f.runEverywhere(t)
	settle(t, base)
}

func randomBytes(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.IntN(256))
	}
	return b
}

func addrOf(t *testing.T, url string) string {
	t.Helper()
	_, rest, _ := strings.Cut(url, "://")
	addr, _, _ := strings.Cut(rest, "#")
	return addr
}

func garbageBytes(t *testing.T, f *fleet) {
	for _, d := range []*daemon{f.relay, f.tcp} {
		c, err := net.Dial("tcp", addrOf(t, d.url))
		if err != nil {
			t.Fatal(err)
		}
		c.Write(randomBytes(4096))
		waitClosed(t, c, 5*time.Second)
		c.Close()
	}
	// Not HTTP at the ws port: a 400 and a closed connection.
	c, err := net.Dial("tcp", addrOf(t, f.ws.url))
	if err != nil {
		t.Fatal(err)
	}
	c.Write(append([]byte("\x00\x01junk\r\n\r\n"), randomBytes(512)...))
	if got := waitClosed(t, c, 5*time.Second); !bytes.Contains(got, []byte("400 Bad Request")) {
		t.Fatalf("ws port answered garbage with %q", got)
	}
	c.Close()
	// Garbage inside an accepted WebSocket: binary and text frames.
	ws := dialWS(t, f)
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageBinary, randomBytes(1024))
	if reply := wsRead(t, ws); reply.Error == nil {
		t.Fatalf("binary garbage: %+v", reply)
	}
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte("{not json"))
	if reply := wsRead(t, ws); reply.Error == nil {
		t.Fatalf("text garbage: %+v", reply)
	}
	ws.CloseNow()
	// Garbage on an authenticated native stream and as a relay control request.
	for _, tc := range []struct {
		url, purpose string
	}{{f.tcp.url, executor.NativePurpose}, {f.relay.url, relay.Purpose}} {
		st := openStream(t, noiseSession(t, tc.url, tc.purpose))
		st.Write(append([]byte{0, 0, 0, 16}, randomBytes(16)...))
		m := readReply(t, st)
		if m.Error == nil || !strings.Contains(m.Error.Message, "msgpack") {
			t.Fatalf("%s: garbage frame answered with %+v", tc.purpose, m)
		}
	}
}

func truncatedHandshakes(t *testing.T, f *fleet) {
	for _, d := range []*daemon{f.relay, f.tcp} {
		c, err := net.Dial("tcp", addrOf(t, d.url))
		if err != nil {
			t.Fatal(err)
		}
		// The start of a Noise message: a length prefix promising more.
		c.Write([]byte{0, 96, 1, 2, 3})
		c.(*net.TCPConn).CloseWrite()
		waitClosed(t, c, 5*time.Second)
		c.Close()
	}
}

func slowHandshakes(t *testing.T, f *fleet) {
	// Dozens of connections that trickle one byte each: the 1 s handshake
	// timeout ends them all, and real work goes on meanwhile.
	var conns []net.Conn
	for range 40 {
		for _, d := range []*daemon{f.relay, f.tcp} {
			c, err := net.Dial("tcp", addrOf(t, d.url))
			if err != nil {
				t.Fatal(err)
			}
			c.Write([]byte{0})
			conns = append(conns, c)
		}
	}
	env := dialClient(t, f.tcp.url, client.Config{NoResume: true})
	mustEcho(t, env, "while slowloris")
	env.Close()
	start := time.Now()
	for _, c := range conns {
		waitClosed(t, c, 5*time.Second)
		c.Close()
	}
	t.Logf("slow handshakes cut after %v", time.Since(start).Round(time.Millisecond))
	// Authenticated but silent at the relay: no control request in time.
	sess := noiseSession(t, f.relay.url, relay.Purpose)
	select {
	case <-sess.CloseChan():
	case <-time.After(5 * time.Second):
		t.Fatal("the relay kept a silent authenticated session")
	}
}

func oversizedLengthPrefixes(t *testing.T, f *fleet) {
	for _, tc := range []struct {
		url, purpose string
	}{{f.tcp.url, executor.NativePurpose}, {f.relay.url, relay.Purpose}} {
		st := openStream(t, noiseSession(t, tc.url, tc.purpose))
		st.Write([]byte{0xff, 0xff, 0xff, 0xff, 1, 2, 3})
		m := readReply(t, st)
		if m.Error == nil || !strings.Contains(m.Error.Message, "size limit") {
			t.Fatalf("%s: oversized frame answered with %+v", tc.purpose, m)
		}
	}
	// Over the ws message limit (64 MiB): refused with a clear error, not
	// buffered, and the connection stays usable.
	ws := dialWS(t, f)
	w, err := ws.Writer(ctxT(t, 30*time.Second), websocket.MessageText)
	if err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte(" "), 1<<20)
	for i := 0; i < 80; i++ {
		if _, err := w.Write(chunk); err != nil {
			t.Fatalf("writing 80 MiB: %v", err)
		}
	}
	w.Close()
	if r := wsRead(t, ws); r.Error == nil || !strings.Contains(r.Error.Message, "size limit") {
		t.Fatalf("an 80 MiB message: %+v", r)
	}
	wsInit(t, ws)
}

func truncatedFrames(t *testing.T, f *fleet) {
	// A frame that promises 100 bytes and delivers 10, then the stream ends.
	sess := noiseSession(t, f.tcp.url, executor.NativePurpose)
	st := openStream(t, sess)
	st.Write(append([]byte{0, 0, 0, 100}, randomBytes(10)...))
	st.Close() // half-close: the executor sees EOF mid-frame
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	var buf [64]byte
	if _, err := st.Read(buf[:]); err == nil || isTimeout(err) {
		t.Fatalf("the executor kept a stream that ended mid-frame: %v", err)
	}
	// A truncated JSON-RPC message: a parse error naming the problem.
	ws := dialWS(t, f)
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{`))
	if reply := wsRead(t, ws); reply.Error == nil {
		t.Fatalf("truncated JSON: %+v", reply)
	}
	ws.CloseNow()
	// A relay peer that ends its control stream mid-frame.
	rst := openStream(t, noiseSession(t, f.relay.url, relay.Purpose))
	rst.Write([]byte{0, 0, 1, 0, 0x94})
	rst.Close()
	rst.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rst.Read(buf[:]); err == nil || isTimeout(err) {
		t.Fatalf("the relay kept a control stream that ended mid-frame: %v", err)
	}
}

func unknownMethods(t *testing.T, f *fleet) {
	ws := dialWS(t, f)
	wsInit(t, ws)
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":2,"method":"nope/nope","params":{}}`))
	if r := wsRead(t, ws); r.Error == nil || r.Error.Code != protocol.CodeMethodNotFound || !strings.Contains(r.Error.Message, "nope/nope") {
		t.Fatalf("ws: %+v", r)
	}
	ws.CloseNow()
	for _, tc := range []struct {
		url, purpose, method string
	}{{f.tcp.url, executor.NativePurpose, "nope/nope"}, {f.relay.url, relay.Purpose, "relay/nope"}} {
		st := openStream(t, noiseSession(t, tc.url, tc.purpose))
		mc := transport.NewMsgpackConn(st, 0)
		if err := mc.WriteRequest(ctxT(t, 5*time.Second), transport.IntID(1), tc.method, map[string]any{}); err != nil {
			t.Fatal(err)
		}
		m := readReply(t, st)
		if m.Error == nil || m.Error.Code != protocol.CodeMethodNotFound || !strings.Contains(m.Error.Message, tc.method) {
			t.Fatalf("%s: %+v", tc.purpose, m)
		}
	}
}

func invalidUTF8(t *testing.T, f *fleet) {
	ws := dialWS(t, f)
	wsInit(t, ws)
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte("{\"jsonrpc\":\"2.0\",\"id\":3,\"method\":\"\xff\xfe\",\"params\":{}}"))
	if r := wsRead(t, ws); r.Error == nil {
		t.Fatalf("a method of invalid UTF-8 was accepted: %+v", r)
	}
	ws.CloseNow()
	// Arguments are bytes on Unix: passed through exactly, not mangled.
	env := dialClient(t, f.tcp.url, client.Config{NoResume: true})
	out, err := client.Command(env, "/bin/echo", "a\xffb\xc3").Output()
	if err != nil || string(out) != "a\xffb\xc3\n" {
		t.Fatalf("invalid UTF-8 argv: %q %v", out, err)
	}
	// An executor id of invalid UTF-8 at the relay.
	st := openStream(t, noiseSession(t, f.relay.url, relay.Purpose))
	mc := transport.NewMsgpackConn(st, 0)
	mc.WriteRequest(ctxT(t, 5*time.Second), transport.IntID(1), protocol.MethodRelayConnect, protocol.RelayConnectParams{ExecutorID: "x\xff", Token: f.clientToken})
	if m := readReply(t, st); m.Error == nil || m.Error.Code != protocol.CodeInvalidParams {
		t.Fatalf("relay: %+v", m)
	}
}

func nulInPaths(t *testing.T, f *fleet) {
	env := dialClient(t, f.tcp.url, client.Config{NoResume: true})
	for _, p := range []protocol.ExecParams{
		{Argv: []string{"/bin/true"}, Cwd: "/tmp\x00/etc", Env: env0},
		{Argv: []string{"/bin/tr\x00ue"}, Env: env0},
		{Argv: []string{"/bin/echo", "a\x00b"}, Env: env0},
		{Argv: []string{"/bin/true"}, Env: map[string]string{"A\x00B": "1"}},
	} {
		_, err := env.Start(ctxT(t, 10*time.Second), p)
		if err == nil || !strings.Contains(err.Error(), "NUL") {
			t.Fatalf("%q: %v", p.Argv, err)
		}
	}
	ws := dialWS(t, f)
	wsInit(t, ws)
	ws.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":4,"method":"process/start","params":{"processId":"p","argv":["/bin/true"],"cwd":"/tmp\u0000x","env":{}}}`))
	if r := wsRead(t, ws); r.Error == nil || !strings.Contains(r.Error.Message, "NUL") {
		t.Fatalf("ws: %+v", r)
	}
	ws.CloseNow()
}

func hugeArgvAndEnv(t *testing.T, f *fleet) {
	env := dialClient(t, f.tcp.url, client.Config{NoResume: true})
	big := strings.Repeat("x", 256<<10) // over the kernel's 128 KiB per string
	for _, p := range []protocol.ExecParams{
		{Argv: []string{"/bin/true", big}, Env: env0},
		{Argv: []string{"/bin/true"}, Env: map[string]string{"PATH": "/bin", "BIG": big}},
	} {
		_, err := env.Start(ctxT(t, 10*time.Second), p)
		if err == nil || !strings.Contains(err.Error(), "argument list too long") {
			t.Fatalf("%d-byte argv/env: %v", len(big), err)
		}
	}
	// Many small arguments, under the kernel's limit: it runs.
	many := make([]string, 20000)
	for i := range many {
		many[i] = "a"
	}
	out, err := client.Command(env, "/bin/sh", append([]string{"-c", `echo $#`, "sh"}, many...)...).Output()
	if err != nil || string(out) != "20000\n" {
		t.Fatalf("20,000 arguments: %q %v", out, err)
	}
	// More JSON values than a message may hold: refused before decoding.
	ws := dialWS(t, f)
	wsInit(t, ws)
	argv := make([]string, 300000)
	for i := range argv {
		argv[i] = "a"
	}
	params, _ := json.Marshal(map[string]any{"processId": "p", "argv": argv, "env": map[string]string{}})
	ws.Write(ctxT(t, 10*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":5,"method":"process/start","params":`+string(params)+`}`))
	if r := wsRead(t, ws); r.Error == nil {
		t.Fatalf("300,000 argv entries accepted: %+v", r)
	}
	ws.CloseNow()
}

func streamFloods(t *testing.T, f *fleet) {
	// Thousands of streams on one authenticated executor connection: the
	// per-connection stream limit resets the excess.
	flood := func(sess *transport.MuxSession, n int) (opened int) {
		ctx := ctxT(t, 5*time.Second)
		for opened < n && ctx.Err() == nil {
			ch := make(chan error, 1)
			go func() {
				st, err := sess.OpenStream()
				if err == nil {
					st.Write([]byte{0, 0, 0, 1}) // a frame header, then silence
				}
				ch <- err
			}()
			select {
			case err := <-ch:
				if err != nil {
					return opened
				}
				opened++
			case <-ctx.Done():
				return opened
			}
		}
		return opened
	}
	sess := noiseSession(t, f.tcp.url, executor.NativePurpose)
	n := flood(sess, 3000)
	t.Logf("executor: %d streams opened", n)
	sess.Close()
	// At the relay, only the first stream of a session is ever accepted.
	rsess := noiseSession(t, f.relay.url, relay.Purpose)
	n = flood(rsess, 2000)
	t.Logf("relay: %d streams opened", n)
	rsess.Close()
}

func connectionFloods(t *testing.T, f *fleet) {
	var wg sync.WaitGroup
	for _, d := range f.all() {
		if d.url == "" {
			continue
		}
		for range 200 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				c, err := net.DialTimeout("tcp", addrOf(t, d.url), 5*time.Second)
				if err == nil {
					c.Close()
				}
			}()
		}
	}
	wg.Wait()
}

func hostileFileRequests(t *testing.T, f *fleet) {
	env := dialClient(t, f.tcp.url, client.Config{NoResume: true})
	ctx := ctxT(t, 20*time.Second)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"NUL in a path":     errOf(env.ReadFile(ctx, "/tmp\x00/etc/passwd")),
		"a relative path":   errOf(env.ReadFile(ctx, "etc/passwd")),
		"a Windows path":    errOf(env.ReadFile(ctx, `C:\Windows\win.ini`)),
		"a device":          errOf(env.ReadFile(ctx, "/dev/zero")),
		"a FIFO (no hang)":  errOf(env.ReadFile(ctx, fifo)),
		"a directory":       errOf(env.ReadFile(ctx, dir)),
		"remove /":          env.Remove(ctx, "/", true),
		"copy into itself":  env.Copy(ctx, dir, filepath.Join(dir, "sub"), true),
		"an invalid policy": env.Files(map[string]any{"mode": "anything-goes"}).WriteFile(ctx, filepath.Join(dir, "x"), nil, 0o644),
	} {
		if err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// Raw requests the client would never send.
	st := openStream(t, noiseSession(t, f.tcp.url, executor.NativePurpose))
	mc := transport.NewMsgpackConn(st, 0)
	call := func(method string, params any) *transport.Message {
		mc.WriteRequest(ctx, transport.IntID(1), method, params)
		return readReply(t, st)
	}
	if m := call("initialize", map[string]any{"clientName": "hostile"}); m.Error != nil {
		t.Fatal(m.Error)
	}
	mc.WriteNotification(ctx, "initialized", map[string]any{})
	for name, m := range map[string]*transport.Message{
		"a 100-byte handle id": call(protocol.MethodFsOpen, map[string]any{"handleId": strings.Repeat("h", 100), "path": fifo}),
		"an unknown handle":    call(protocol.MethodFsReadBlock, map[string]any{"handleId": "nope", "offset": 0, "len": 1 << 40}),
		"a block too large":    call(protocol.MethodFsWriteBlock, map[string]any{"handleId": "nope", "offset": 0, "chunk": make([]byte, 5<<20)}),
		"no params":            call(protocol.MethodFsReadFile, nil),
	} {
		if m.Error == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	// A huge block length is clamped, not allocated.
	os.WriteFile(filepath.Join(dir, "small"), []byte("abc"), 0o644)
	if m := call(protocol.MethodFsOpen, map[string]any{"handleId": "h", "path": filepath.Join(dir, "small")}); m.Error != nil {
		t.Fatal(m.Error)
	}
	var res protocol.FsReadBlockResult
	m := call(protocol.MethodFsReadBlock, map[string]any{"handleId": "h", "offset": 0, "len": uint64(1) << 62})
	if m.Error != nil || m.Result.Decode(&res) != nil || string(res.Chunk) != "abc" || !res.EOF {
		t.Fatalf("huge len: %+v %q", m, res.Chunk)
	}
}

func errOf[T any](_ T, err error) error { return err }

func vanishingClients(t *testing.T, f *fleet) {
	// Clients that start long-running work and vanish without a word: the
	// sessions detach, and after --detached-ttl their processes are killed
	// and reaped — including one that left the process group with setsid,
	// which only the command's cgroup still holds.
	for _, url := range []string{f.tcp.url, f.ws.url} {
		env := dialClient(t, url, client.Config{NoResume: true})
		for range 5 {
			if _, err := env.Start(ctxT(t, 10*time.Second), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "setsid sleep 60 </dev/null >/dev/null 2>&1 & sleep 60 & exec sleep 60"}, Env: env0}); err != nil {
				t.Fatal(err)
			}
		}
		env.Close()
	}
	rel, err := client.Dial(ctxT(t, 10*time.Second), f.relay.url, client.Config{Executor: "bad-1", Token: f.clientToken,
		KnownExecutors: filepath.Join(t.TempDir(), "known"), NoResume: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rel.Start(ctxT(t, 10*time.Second), protocol.ExecParams{Argv: []string{"/bin/sleep", "60"}, Env: env0}); err != nil {
		t.Fatal(err)
	}
	rel.Close()
}

// openStream opens a mux stream.
func openStream(t *testing.T, sess *transport.MuxSession) *transport.MuxStream {
	t.Helper()
	st, err := sess.OpenStream()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// readReply reads one msgpack message from st within 5 s.
func readReply(t *testing.T, st *transport.MuxStream) *transport.Message {
	t.Helper()
	st.SetReadDeadline(time.Now().Add(5 * time.Second))
	m, err := transport.NewMsgpackConn(st, 0).ReadMessage(context.Background())
	if err != nil {
		t.Fatalf("no reply: %v", err)
	}
	return m
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func dialWS(t *testing.T, f *fleet) *websocket.Conn {
	t.Helper()
	c, _, err := websocket.Dial(ctxT(t, 5*time.Second), f.ws.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return c
}

// wsReply is a JSON-RPC response.
type wsReply struct {
	ID     json.RawMessage `json:"id"`
	Result json.RawMessage `json:"result"`
	Error  *protocol.Error `json:"error"`
}

func wsRead(t *testing.T, c *websocket.Conn) wsReply {
	t.Helper()
	for {
		_, b, err := c.Read(ctxT(t, 10*time.Second))
		if err != nil {
			t.Fatalf("no reply: %v", err)
		}
		var r wsReply
		if err := json.Unmarshal(b, &r); err != nil {
			t.Fatalf("reply %q: %v", b, err)
		}
		if r.ID == nil && r.Error == nil {
			continue // a notification
		}
		return r
	}
}

func wsInit(t *testing.T, c *websocket.Conn) {
	t.Helper()
	c.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"clientName":"hardening"}}`))
	if r := wsRead(t, c); r.Error != nil {
		t.Fatalf("initialize: %+v", r.Error)
	}
	c.Write(ctxT(t, 5*time.Second), websocket.MessageText, []byte(`{"jsonrpc":"2.0","method":"initialized"}`))
}
