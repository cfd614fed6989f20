package bridge_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"
	"go.uber.org/zap/zaptest"

	"github.com/outpost-exec/outpost/bridge"
	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay"
	"github.com/outpost-exec/outpost/sandbox"
)

const testTimeout = 60 * time.Second

// TestMain lets this test binary serve as the sandbox helper of the
// in-process executors.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	os.Exit(m.Run())
}

var testEnv = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}

func newKey(t *testing.T) identity.Key {
	t.Helper()
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	return k
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	t.Cleanup(cancel)
	return ctx
}

// upstream is an executor the bridge forwards to, and how to dial it.
type upstream struct {
	url      string
	opts     client.Config
	restart  func() // restarts the relay (relayed only)
	executor *executor.Server
}

func newExecutorServer(t *testing.T, tweak func(*executor.Config)) *executor.Server {
	t.Helper()
	cfg := executor.DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := executor.NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return srv
}

// direct starts an executor on tcp:// (Noise + yamux).
func direct(t *testing.T, tweak func(*executor.Config)) *upstream {
	t.Helper()
	key := newKey(t)
	srv := newExecutorServer(t, tweak)
	ln, err := srv.ListenNative("tcp://127.0.0.1:0", executor.NativeConfig{Key: key.Keypair()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return &upstream{url: ln.URL() + "#" + key.PublicKey().Fingerprint(), executor: srv,
		opts: client.Config{Key: newKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known_executors")}}
}

// relayed starts a relay and an executor joined to it as "build-1".
func relayed(t *testing.T) *upstream {
	t.Helper()
	tokens, err := relay.OpenStore(filepath.Join(t.TempDir(), "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	rkey := newKey(t)
	var mu sync.Mutex
	var ln *relay.Listener
	start := func(addr string) string {
		srv, err := relay.NewServer(relay.Config{Key: rkey.Keypair(), Tokens: tokens, Logger: zaptest.NewLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		l, err := srv.Listen(addr)
		if err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		ln = l
		mu.Unlock()
		return l.Addr().String()
	}
	addr := start("127.0.0.1:0")
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		ln.Close()
	})
	url := "outpost://" + addr + "#" + rkey.PublicKey().Fingerprint()
	joinTok, _, err := tokens.Create(relay.TokenJoin, relay.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	clientTok, _, err := tokens.Create(relay.TokenClient, relay.CreateOptions{Executors: "build-*"})
	if err != nil {
		t.Fatal(err)
	}
	srv := newExecutorServer(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	joined := make(chan struct{}, 16)
	done := make(chan error, 1)
	go func() {
		done <- srv.Join(ctx, executor.JoinConfig{RelayURL: url, Key: newKey(t).Keypair(), ID: "build-1", Token: joinTok,
			Joined: func() { joined <- struct{}{} }})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-joined:
	case err := <-done:
		t.Fatalf("join ended: %v", err)
	case <-time.After(testTimeout):
		t.Fatal("the executor did not join")
	}
	return &upstream{url: url, executor: srv,
		opts: client.Config{Key: newKey(t), KnownExecutors: filepath.Join(t.TempDir(), "known_executors"), Executor: "build-1", Token: clientTok},
		restart: func() {
			mu.Lock()
			ln.Close()
			mu.Unlock()
			start(addr)
		}}
}

// startBridge serves a bridge to up on loopback.
func startBridge(t *testing.T, up *upstream, tweak func(*bridge.Config)) (*bridge.Bridge, string) {
	t.Helper()
	cfg := bridge.Config{
		Dial: func(ctx context.Context, clientName string) (*client.Remote, error) {
			o := up.opts
			o.ClientName = "bridge-test for " + clientName
			return client.Dial(ctx, up.url, o)
		},
		Logger: zaptest.NewLogger(t),
	}
	if tweak != nil {
		tweak(&cfg)
	}
	b, err := bridge.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close(); b.Close() })
	return b, l.URL()
}

// codex is a JSON-RPC lite client over a real WebSocket, as codex speaks it.
type codex struct {
	t      *testing.T
	ws     *websocket.Conn
	next   int64
	mu     sync.Mutex
	wmu    sync.Mutex
	calls  map[int64]chan reply
	notes  chan note
	done   chan struct{}
	endErr error
}

type reply struct {
	Result json.RawMessage
	Error  *protocol.Error
}

type note struct {
	Method string
	Params json.RawMessage
}

func dialCodex(t *testing.T, url string, header http.Header) *codex {
	t.Helper()
	ws, _, err := websocket.Dial(ctxT(t), url, &websocket.DialOptions{HTTPHeader: header})
	if err != nil {
		t.Fatal(err)
	}
	ws.SetReadLimit(-1)
	c := &codex{t: t, ws: ws, calls: map[int64]chan reply{}, notes: make(chan note, 1<<16), done: make(chan struct{})}
	go c.read()
	t.Cleanup(func() { ws.CloseNow() })
	return c
}

func (c *codex) read() {
	defer close(c.done)
	for {
		_, data, err := c.ws.Read(context.Background())
		if err != nil {
			c.endErr = err
			return
		}
		var env struct {
			ID     *int64          `json:"id"`
			Method string          `json:"method"`
			Params json.RawMessage `json:"params"`
			Result json.RawMessage `json:"result"`
			Error  *protocol.Error `json:"error"`
		}
		if err := json.Unmarshal(data, &env); err != nil {
			c.endErr = fmt.Errorf("undecodable message %q: %v", data, err)
			return
		}
		if env.Method != "" {
			c.notes <- note{env.Method, env.Params}
			continue
		}
		if env.ID == nil {
			continue
		}
		c.mu.Lock()
		ch := c.calls[*env.ID]
		delete(c.calls, *env.ID)
		c.mu.Unlock()
		if ch != nil {
			ch <- reply{env.Result, env.Error}
		} else {
			c.notes <- note{"error-reply", data}
		}
	}
}

func (c *codex) send(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		c.t.Fatal(err)
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.ws.Write(ctxT(c.t), websocket.MessageText, b); err != nil {
		c.t.Fatalf("write: %v", err)
	}
}

// call sends a request and waits for its reply.
func (c *codex) call(method string, params any) reply {
	c.t.Helper()
	c.mu.Lock()
	c.next++
	id := c.next
	ch := make(chan reply, 1)
	c.calls[id] = ch
	c.mu.Unlock()
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	c.send(msg)
	select {
	case r := <-ch:
		return r
	case <-c.done:
		c.t.Fatalf("%s: connection ended: %v", method, c.endErr)
	case <-time.After(testTimeout):
		c.t.Fatalf("%s: no reply", method)
	}
	return reply{}
}

// ok calls and decodes a successful result into out (if non-nil).
func (c *codex) ok(method string, params, out any) {
	c.t.Helper()
	r := c.call(method, params)
	if r.Error != nil {
		c.t.Fatalf("%s: error %d %s", method, r.Error.Code, r.Error.Message)
	}
	if out != nil {
		if err := json.Unmarshal(r.Result, out); err != nil {
			c.t.Fatalf("%s: result %s: %v", method, r.Result, err)
		}
	}
}

// fails calls and returns its error, which it requires.
func (c *codex) fails(method string, params any) *protocol.Error {
	c.t.Helper()
	r := c.call(method, params)
	if r.Error == nil {
		c.t.Fatalf("%s: want an error, got %s", method, r.Result)
	}
	return r.Error
}

func (c *codex) initialize(resume string) string {
	c.t.Helper()
	p := map[string]any{"clientName": "codex-test"}
	if resume != "" {
		p["resumeSessionId"] = resume
	}
	var res protocol.InitializeResult
	c.ok("initialize", p, &res)
	c.send(map[string]any{"method": "initialized"})
	if res.SessionID == "" {
		c.t.Fatal("no session id")
	}
	return res.SessionID
}

// event is one process notification as codex receives it.
type event struct {
	method string
	pid    string
	seq    uint64
	stream string
	data   []byte
	exit   int32
	denied bool
	raw    json.RawMessage
}

func (c *codex) nextEvent() event {
	c.t.Helper()
	select {
	case n := <-c.notes:
		return parseEvent(c.t, n)
	case <-c.done:
		// drain what arrived before the end
		select {
		case n := <-c.notes:
			return parseEvent(c.t, n)
		default:
		}
		c.t.Fatalf("connection ended while waiting for events: %v", c.endErr)
	case <-time.After(testTimeout):
		c.t.Fatal("no event")
	}
	return event{}
}

func parseEvent(t *testing.T, n note) event {
	t.Helper()
	var p struct {
		ProcessID     string `json:"processId"`
		Seq           uint64 `json:"seq"`
		Stream        string `json:"stream"`
		Chunk         string `json:"chunk"`
		ExitCode      int32  `json:"exitCode"`
		SandboxDenied bool   `json:"sandboxDenied"`
	}
	if err := json.Unmarshal(n.Params, &p); err != nil {
		t.Fatalf("%s %s: %v", n.Method, n.Params, err)
	}
	ev := event{method: n.Method, pid: p.ProcessID, seq: p.Seq, stream: p.Stream, exit: p.ExitCode, denied: p.SandboxDenied, raw: n.Params}
	if n.Method == protocol.MethodProcessOutput {
		b, err := base64.StdEncoding.DecodeString(p.Chunk)
		if err != nil {
			t.Fatalf("chunk %q is not base64: %v", p.Chunk, err)
		}
		ev.data = b
	}
	return ev
}

// run collects a process's events until process/closed, requiring seqs
// 1, 2, 3 … and the exit just before the close (no grandchildren here).
type run struct {
	events []event
	stdout bytes.Buffer
	stderr bytes.Buffer
	exit   *event
}

func (c *codex) collect(pid string) *run {
	c.t.Helper()
	r := &run{}
	for {
		ev := c.nextEvent()
		if ev.pid != pid {
			c.t.Fatalf("event of %q while collecting %q: %+v", ev.pid, pid, ev)
		}
		if want := uint64(len(r.events) + 1); ev.seq != want {
			c.t.Fatalf("%s seq %d, want %d (events so far %d)", ev.method, ev.seq, want, len(r.events))
		}
		r.events = append(r.events, ev)
		switch ev.method {
		case protocol.MethodProcessOutput:
			if r.exit != nil {
				c.t.Fatalf("output after the exit: %+v", ev)
			}
			if ev.stream == "stderr" {
				r.stderr.Write(ev.data)
			} else {
				r.stdout.Write(ev.data)
			}
		case protocol.MethodProcessExited:
			e := ev
			r.exit = &e
		case protocol.MethodProcessClosed:
			if r.exit == nil {
				c.t.Fatal("closed without an exit")
			}
			return r
		default:
			c.t.Fatalf("unexpected %s", ev.method)
		}
	}
}

func startParams(id string, argv ...string) map[string]any {
	return map[string]any{"processId": id, "argv": argv, "cwd": "/", "env": testEnv, "tty": false}
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// topologies runs f against a direct tcp:// executor and one joined to a
// relay.
func topologies(t *testing.T, f func(t *testing.T, up *upstream)) {
	t.Run("direct", func(t *testing.T) { f(t, direct(t, nil)) })
	t.Run("relay", func(t *testing.T) { f(t, relayed(t)) })
}

func TestProcessLifecycleThroughTheBridge(t *testing.T) {
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		c.initialize("")

		var started protocol.StartResult
		c.ok("process/start", startParams("p1", "/bin/sh", "-c", "echo hi; echo err >&2; exit 3"), &started)
		if started.ProcessID != "p1" || started.Pid == 0 {
			t.Fatalf("start result %+v", started)
		}
		r := c.collect("p1")
		if r.stdout.String() != "hi\n" || r.stderr.String() != "err\n" || r.exit.exit != 3 {
			t.Fatalf("stdout %q stderr %q exit %+v", r.stdout.String(), r.stderr.String(), r.exit)
		}
		// The chunk is base64 on the wire, as codex's own server sends it.
		for _, ev := range r.events {
			if ev.method == protocol.MethodProcessOutput && ev.stream == "stdout" && !bytes.Contains(ev.raw, []byte(`"chunk":"`+b64("hi\n")+`"`)) {
				t.Fatalf("output params %s", ev.raw)
			}
		}

		// process/read from the executor's retention, all and after seq 1.
		var all, rest protocol.ReadResult
		c.ok("process/read", map[string]any{"processId": "p1", "afterSeq": 0}, &all)
		c.ok("process/read", map[string]any{"processId": "p1", "afterSeq": 1}, &rest)
		if len(all.Chunks) != 2 || !all.Exited || *all.ExitCode != 3 || !all.Closed || all.Chunks[0].Seq != 1 {
			t.Fatalf("read after 0: %+v", all)
		}
		if len(rest.Chunks) != 1 || rest.Chunks[0].Seq != 2 {
			t.Fatalf("read after 1: %+v", rest)
		}
		if r := c.call("process/read", map[string]any{"processId": "p1", "afterSeq": 4}); !bytes.Contains(r.Result, []byte(`"chunks":[],`)) {
			t.Fatalf("read after the end: %s %v", r.Result, r.Error)
		}
		got := map[string]string{}
		for _, ch := range all.Chunks {
			got[string(ch.Stream)] += string(ch.Chunk)
		}
		if got["stdout"] != "hi\n" || got["stderr"] != "err\n" {
			t.Fatalf("read chunks %v", got)
		}

		// stdin: write (with codex's writeId) and close.
		c.ok("process/start", map[string]any{"processId": "cat", "argv": []string{"cat"}, "cwd": "/", "env": testEnv, "pipeStdin": true}, nil)
		var w protocol.WriteResult
		c.ok("process/write", map[string]any{"processId": "cat", "chunk": b64("hello\n"), "writeId": "w1"}, &w)
		if w.Status != protocol.WriteAccepted {
			t.Fatalf("write %+v", w)
		}
		// The same writeId again is accepted and writes nothing: the id
		// reached the executor.
		c.ok("process/write", map[string]any{"processId": "cat", "chunk": b64("dup\n"), "writeId": "w1"}, &w)
		c.ok("process/write", map[string]any{"processId": "cat", "chunk": "", "writeId": "w2", "closeStdin": true}, &w)
		if w.Status != protocol.WriteAccepted {
			t.Fatalf("close stdin %+v", w)
		}
		r = c.collect("cat")
		if r.stdout.String() != "hello\n" || r.exit.exit != 0 {
			t.Fatalf("cat: %q exit %d", r.stdout.String(), r.exit.exit)
		}

		// terminate a long sleep.
		c.ok("process/start", startParams("sleep", "sleep", "30"), nil)
		var term protocol.TerminateResult
		c.ok("process/terminate", map[string]any{"processId": "sleep"}, &term)
		if !term.Running {
			t.Fatal("terminate: not running")
		}
		r = c.collect("sleep")
		if r.exit.exit != 128+15 {
			t.Fatalf("terminated sleep exit %d", r.exit.exit)
		}
		// signal and resize errors pass through as the executor says them.
		c.ok("process/signal", map[string]any{"processId": "gone", "signal": "interrupt"}, nil)
		if e := c.fails("process/signal", map[string]any{"processId": "sleep", "signal": "bogus"}); e.Code != protocol.CodeInvalidParams {
			t.Fatalf("bad signal: %+v", e)
		}
		if e := c.fails("process/resize", map[string]any{"processId": "nope", "rows": 10, "cols": 10}); e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "unknown process id nope") {
			t.Fatalf("resize: %+v", e)
		}
		if e := c.fails("process/start", startParams("p1", "true")); e.Code != protocol.CodeInvalidRequest {
			t.Fatalf("duplicate id: %+v", e)
		}
	})
}

func TestFilesAndEnvironmentInfoThroughTheBridge(t *testing.T) {
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		c.initialize("")
		dir := t.TempDir()
		path := filepath.Join(dir, "blob.bin")
		data := []byte("binary\x00\xff\xfe data\n")
		c.ok("fs/writeFile", map[string]any{"path": path, "dataBase64": base64.StdEncoding.EncodeToString(data)}, nil)
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, data) {
			t.Fatalf("on disk %q %v", b, err)
		}
		var rf struct {
			Data string `json:"dataBase64"`
		}
		c.ok("fs/readFile", map[string]any{"path": path}, &rf)
		if got, _ := base64.StdEncoding.DecodeString(rf.Data); !bytes.Equal(got, data) {
			t.Fatalf("readFile %q", rf.Data)
		}
		var md protocol.FsMetadata
		c.ok("fs/getMetadata", map[string]any{"path": path}, &md)
		if !md.IsFile || md.IsDirectory || md.Size != uint64(len(data)) || md.ModifiedAtMs == 0 {
			t.Fatalf("metadata %+v", md)
		}
		var dirents protocol.FsReadDirectoryResult
		c.ok("fs/readDirectory", map[string]any{"path": dir}, &dirents)
		if len(dirents.Entries) != 1 || dirents.Entries[0].FileName != "blob.bin" {
			t.Fatalf("readDirectory %+v", dirents)
		}
		// Streamed read through a handle (fs/open, fs/readBlock, fs/close).
		c.ok("fs/open", map[string]any{"handleId": "h1", "path": path}, nil)
		var blk protocol.FsReadBlockResult
		c.ok("fs/readBlock", map[string]any{"handleId": "h1", "offset": 0, "len": 1024}, &blk)
		if !bytes.Equal(blk.Chunk, data) || !blk.EOF {
			t.Fatalf("readBlock %+v", blk)
		}
		c.ok("fs/close", map[string]any{"handleId": "h1"}, nil)

		// Empty values stay empty, not null, after the msgpack leg.
		empty := filepath.Join(dir, "empty")
		os.Mkdir(empty, 0o755)
		os.WriteFile(filepath.Join(empty, "nothing"), nil, 0o644)
		if r := c.call("fs/readFile", map[string]any{"path": filepath.Join(empty, "nothing")}); string(r.Result) != `{"dataBase64":""}` {
			t.Fatalf("empty file: %s %v", r.Result, r.Error)
		}
		os.Remove(filepath.Join(empty, "nothing"))
		if r := c.call("fs/readDirectory", map[string]any{"path": empty}); string(r.Result) != `{"entries":[]}` {
			t.Fatalf("empty directory: %s %v", r.Result, r.Error)
		}

		// Executor errors come back with their code and message.
		missing := filepath.Join(dir, "missing")
		e := c.fails("fs/readFile", map[string]any{"path": missing})
		if e.Code != protocol.CodeNotFound || !strings.Contains(e.Message, missing) {
			t.Fatalf("missing file: %+v", e)
		}
		if e := c.fails("fs/writeFile", map[string]any{"path": path, "dataBase64": "not base64!"}); e.Code != protocol.CodeInvalidRequest {
			t.Fatalf("bad base64: %+v", e)
		}
		if e := c.fails("fs/frobnicate", map[string]any{"path": path}); e.Code != protocol.CodeMethodNotFound {
			t.Fatalf("unknown method: %+v", e)
		}

		var info protocol.EnvironmentInfo
		c.ok("environment/info", nil, &info)
		if info.PlatformOS != "linux" || info.Shell.Path == "" || !strings.HasPrefix(info.Cwd, "file://") {
			t.Fatalf("info %+v", info)
		}
	})
}

func TestSandboxPassesThroughAndIsEnforcedOnTheExecutor(t *testing.T) {
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeReadOnly}); err != nil {
		testdeps.Missing(t, "sandbox", "this machine cannot enforce the sandbox: %v", err)
	}
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		c.initialize("")
		cwd := t.TempDir()
		p := startParams("sb", "/bin/sh", "-c", "cat /etc/hostname >/dev/null && echo read-ok && echo x > f.txt")
		p["cwd"] = cwd
		p["sandbox"] = map[string]any{"mode": "read-only"}
		var res protocol.StartResult
		c.ok("process/start", p, &res)
		if res.SandboxType == "" {
			t.Fatalf("start result %+v: no sandbox type", res)
		}
		r := c.collect("sb")
		if r.exit.exit == 0 || !r.exit.denied || !strings.Contains(r.stdout.String(), "read-ok") {
			t.Fatalf("exit %+v stdout %q stderr %q", r.exit, r.stdout.String(), r.stderr.String())
		}
		if _, err := os.Stat(filepath.Join(cwd, "f.txt")); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the sandboxed write happened: %v", err)
		}
		// An fs call judged by a policy is refused on the executor too.
		e := c.fails("fs/writeFile", map[string]any{"path": filepath.Join(cwd, "g.txt"), "dataBase64": b64("x"), "sandbox": map[string]any{"mode": "read-only"}})
		if e.Code != protocol.CodeInvalidRequest {
			t.Fatalf("policy-judged write: %+v", e)
		}
	})
}

// TestSandboxNumbersPassThroughExactly forwards to a stand-in executor
// that records what it receives: the policy's numbers are not rounded
// through float64 on the way.
func TestSandboxNumbersPassThroughExactly(t *testing.T) {
	got := make(chan json.RawMessage, 1)
	fake := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		for {
			_, data, err := ws.Read(r.Context())
			if err != nil {
				return
			}
			var m struct {
				ID     *int64 `json:"id"`
				Method string `json:"method"`
				Params struct {
					Sandbox json.RawMessage `json:"sandbox"`
				} `json:"params"`
			}
			json.Unmarshal(data, &m)
			if m.ID == nil {
				continue
			}
			result := `{}`
			switch m.Method {
			case "initialize":
				result = `{"sessionId":"s"}`
			case "process/start":
				got <- m.Params.Sandbox
				result = `{"processId":"n"}`
			}
			ws.Write(r.Context(), websocket.MessageText, []byte(fmt.Sprintf(`{"id":%d,"result":%s}`, *m.ID, result)))
		}
	}))
	defer fake.Close()
	up := &upstream{url: "ws://" + strings.TrimPrefix(fake.URL, "http://")}
	_, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	p := startParams("n", "true")
	policy := `{"big":18446744073709551615,"entries":[{"access":"read","path":"/"}],"glob_scan_max_depth":9007199254740993,"mode":"read-only","ratio":0.5}` // keys sorted, as re-encoded
	p["sandbox"] = json.RawMessage(policy)
	c.ok("process/start", p, nil)
	if sb := <-got; string(sb) != policy {
		t.Fatalf("the executor got %s, want %s", sb, policy)
	}
}

func TestRelayRestartWhileStreamingDeliversEveryLineOnce(t *testing.T) {
	up := relayed(t)
	up.opts.RecoveryTimeout = 30 * time.Second
	b, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	const lines = 200000
	c.ok("process/start", startParams("seq", "/bin/sh", "-c", fmt.Sprintf("seq %d | while read n; do echo $n; case $n in 1000) sleep 1;; esac; done", lines)), nil)
	var got bytes.Buffer
	restarted := false
	var last uint64
	for {
		ev := c.nextEvent()
		if ev.seq != last+1 {
			t.Fatalf("%s seq %d after %d", ev.method, ev.seq, last)
		}
		last = ev.seq
		if ev.method == protocol.MethodProcessClosed {
			break
		}
		if ev.method == protocol.MethodProcessExited && ev.exit != 0 {
			t.Fatalf("exit %d", ev.exit)
		}
		got.Write(ev.data)
		if !restarted && got.Len() > 1000 {
			restarted = true
			up.restart()
		}
	}
	var want bytes.Buffer
	for i := 1; i <= lines; i++ {
		want.WriteString(strconv.Itoa(i) + "\n")
	}
	if !bytes.Equal(got.Bytes(), want.Bytes()) {
		t.Fatalf("got %d bytes, want %d", got.Len(), want.Len())
	}
	if st := b.Stats(); st.Sessions != 1 || st.Processes != 0 || st.Reconnects == 0 {
		t.Fatalf("stats %+v: want one session, no process, and a resumed upstream connection", st)
	}
}

func TestResumeReattachesTheSessionAndItsProcesses(t *testing.T) {
	up := direct(t, nil)
	b, url := startBridge(t, up, nil)
	c1 := dialCodex(t, url, nil)
	sid := c1.initialize("")
	c1.ok("process/start", map[string]any{"processId": "r", "argv": []string{"/bin/sh", "-c", "echo before; read x; echo got:$x"}, "cwd": "/", "env": testEnv, "pipeStdin": true}, nil)
	if ev := c1.nextEvent(); string(ev.data) != "before\n" {
		t.Fatalf("%+v", ev)
	}
	// A second connection cannot take an attached session.
	c2 := dialCodex(t, url, nil)
	if e := c2.fails("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid}); e.Code != protocol.CodeSessionAlreadyAttached {
		t.Fatalf("%+v", e)
	}
	c1.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return b.Stats().Detached == 1 })

	c3 := dialCodex(t, url, nil)
	if got := c3.initialize(sid); got != sid {
		t.Fatalf("resumed %s, want %s", got, sid)
	}
	c3.ok("process/write", map[string]any{"processId": "r", "chunk": b64("again\n"), "writeId": "w1"}, nil)
	for _, want := range []string{protocol.MethodProcessOutput, protocol.MethodProcessExited, protocol.MethodProcessClosed} {
		ev := c3.nextEvent()
		if ev.method != want || ev.pid != "r" || (want == protocol.MethodProcessOutput && string(ev.data) != "got:again\n") {
			t.Fatalf("want %s, got %+v (%s)", want, ev, ev.data)
		}
	}
	var all protocol.ReadResult
	c3.ok("process/read", map[string]any{"processId": "r", "afterSeq": 0}, &all)
	if len(all.Chunks) != 2 || string(all.Chunks[0].Chunk) != "before\n" {
		t.Fatalf("%+v", all)
	}
	c4 := dialCodex(t, url, nil)
	if e := c4.fails("initialize", map[string]any{"clientName": "x", "resumeSessionId": "nope"}); e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("%+v", e)
	}
}

func TestDetachedSessionExpiresAndTerminatesItsProcesses(t *testing.T) {
	up := direct(t, nil)
	b, url := startBridge(t, up, func(c *bridge.Config) { c.DetachedTTL = 300 * time.Millisecond })
	c1 := dialCodex(t, url, nil)
	sid := c1.initialize("")
	var res protocol.StartResult
	c1.ok("process/start", startParams("s", "/bin/sh", "-c", "echo up; exec sleep 60"), &res)
	if ev := c1.nextEvent(); string(ev.data) != "up\n" {
		t.Fatalf("%+v", ev)
	}
	c1.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return b.Stats().Sessions == 0 })
	// The executor runs in this process: its child is ours to look at.
	waitFor(t, func() bool { return !procgroup.Alive(res.Pid) })
	c2 := dialCodex(t, url, nil)
	if e := c2.fails("initialize", map[string]any{"clientName": "x", "resumeSessionId": sid}); e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("%+v", e)
	}
}

func TestLifecycleAndUnknownMethods(t *testing.T) {
	up := direct(t, nil)
	_, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	if e := c.fails("process/start", startParams("x", "true")); e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "initialize") {
		t.Fatalf("%+v", e)
	}
	// Before initialize there is no executor to ask whether a method
	// exists: every method is refused for the lifecycle.
	if e := c.fails("nope/nope", nil); e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "initialize") {
		t.Fatalf("%+v", e)
	}
	c.initialize("")
	// After it, a method the executor lacks is the executor's -32601,
	// forwarded with its kind.
	if e := c.fails("nope/nope", nil); e.Code != protocol.CodeMethodNotFound || protocol.KindOf(e) != protocol.KindUnsupported {
		t.Fatalf("%+v", e)
	}
	if e := c.fails("initialize", map[string]any{"clientName": "again"}); e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("%+v", e)
	}
	if e := c.fails("process/start", map[string]any{"processId": "", "argv": []string{"true"}}); e.Code != protocol.CodeInvalidParams {
		t.Fatalf("%+v", e)
	}
}

func TestSessionAndProcessTablesAreBounded(t *testing.T) {
	up := direct(t, nil)
	b, url := startBridge(t, up, func(c *bridge.Config) { c.MaxSessions, c.MaxProcessesPerSession = 1, 1 })
	c1 := dialCodex(t, url, nil)
	first := c1.initialize("")
	c1.ok("process/start", startParams("a", "sleep", "30"), nil)
	if e := c1.fails("process/start", startParams("b", "true")); e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "too many processes") {
		t.Fatalf("%+v", e)
	}
	// The table is full of attached sessions: a new one is refused.
	c2 := dialCodex(t, url, nil)
	if e := c2.fails("initialize", map[string]any{"clientName": "x"}); e.Code != protocol.CodeInvalidRequest || !strings.Contains(e.Message, "too many sessions") {
		t.Fatalf("%+v", e)
	}
	// A detached session makes room for a new one.
	c1.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return b.Stats().Detached == 1 })
	c3 := dialCodex(t, url, nil)
	if sid := c3.initialize(""); sid == first {
		t.Fatal("the session id was reused")
	}
	if st := b.Stats(); st.Sessions != 1 || st.Detached != 0 || st.Processes != 0 {
		t.Fatalf("stats %+v", st)
	}
	c4 := dialCodex(t, url, nil)
	if e := c4.fails("initialize", map[string]any{"clientName": "x", "resumeSessionId": first}); e.Code != protocol.CodeInvalidRequest {
		t.Fatalf("the evicted session: %+v", e)
	}
}

func TestAFloodingProcessDoesNotHoldUpAnother(t *testing.T) {
	up := direct(t, nil)
	_, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	c.ok("process/start", startParams("flood", "/bin/sh", "-c", "seq 1 3000000"), nil)
	// Wait for the flood to be under way.
	for ev := c.nextEvent(); ev.pid != "flood"; ev = c.nextEvent() {
	}
	c.ok("process/start", startParams("quick", "echo", "quick"), nil)
	floodClosed := false
	for {
		ev := c.nextEvent()
		if ev.pid == "flood" && ev.method == protocol.MethodProcessClosed {
			floodClosed = true
		}
		if ev.pid == "quick" && ev.method == protocol.MethodProcessClosed {
			break
		}
	}
	if floodClosed {
		t.Fatal("the quick process's events waited for the whole flood")
	}
}

// proxy forwards TCP to target and can stop, as a network failure would.
type proxy struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  []net.Conn
}

func startProxy(t *testing.T, target string) *proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	t.Cleanup(func() { p.stop() })
	go p.serve(ln)
	return p
}

func (p *proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.target)
		if err != nil {
			c.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, c, u)
		p.mu.Unlock()
		go pipe(c, u)
		go pipe(u, c)
	}
}

func pipe(dst, src net.Conn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

// stop closes the port and cuts every connection.
func (p *proxy) stop() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// restart reopens the port.
func (p *proxy) restart(t *testing.T) {
	ln, err := net.Listen("tcp", p.ln.Addr().String())
	if err != nil {
		t.Fatalf("could not reopen the proxy port: %v", err)
	}
	p.ln = ln
	go p.serve(ln)
}

func (p *proxy) url(up *upstream) string {
	_, fp, _ := strings.Cut(up.url, "#")
	return "tcp://" + p.ln.Addr().String() + "#" + fp
}

func TestUpstreamLostFailsProcessesAndClosesTheWebSocket(t *testing.T) {
	up := direct(t, nil)
	px := startProxy(t, strings.TrimPrefix(strings.SplitN(up.url, "#", 2)[0], "tcp://"))
	up.url = px.url(up)
	up.opts.RecoveryTimeout = time.Second
	b, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	c.ok("process/start", startParams("long", "/bin/sh", "-c", "echo up; exec sleep 60"), nil)
	if ev := c.nextEvent(); string(ev.data) != "up\n" {
		t.Fatalf("%+v", ev)
	}
	px.stop()
	ev := c.nextEvent()
	if ev.method != protocol.MethodProcessClosed || ev.pid != "long" || ev.seq != 2 {
		t.Fatalf("want process/closed of long, got %+v", ev)
	}
	select {
	case <-c.done:
	case <-time.After(testTimeout):
		t.Fatal("the WebSocket stayed open")
	}
	if st := websocket.CloseStatus(c.endErr); st != websocket.StatusInternalError {
		t.Fatalf("close %v (status %d), want 1011", c.endErr, st)
	}
	var ce websocket.CloseError
	if !errors.As(c.endErr, &ce) || !strings.Contains(ce.Reason, "executor connection was lost") {
		t.Fatalf("close reason %v", c.endErr)
	}
	waitFor(t, func() bool { return b.Stats().Sessions == 0 })
}

func TestEvictedOutputIsFollowedByReadsPastTheGap(t *testing.T) {
	gate := filepath.Join(t.TempDir(), "gate")
	up := direct(t, func(c *executor.Config) {
		lb := engine.NewLocalBackend()
		lb.Retention = engine.Retention{MaxBytes: 64 << 10, MaxChunks: 4}
		c.Backend = lb
	})
	px := startProxy(t, strings.TrimPrefix(strings.SplitN(up.url, "#", 2)[0], "tcp://"))
	up.url = px.url(up)
	up.opts.RecoveryTimeout = 20 * time.Second
	_, url := startBridge(t, up, nil)
	c := dialCodex(t, url, nil)
	c.initialize("")
	script := "echo first; while [ ! -e " + gate + " ]; do sleep 0.01; done; seq 1 100000; echo last"
	c.ok("process/start", startParams("lossy", "/bin/sh", "-c", script), nil)
	if ev := c.nextEvent(); string(ev.data) != "first\n" {
		t.Fatalf("%+v", ev)
	}
	// The bridge's upstream connection is down while the output is
	// produced and evicted.
	px.stop()
	os.WriteFile(gate, nil, 0o600)
	time.Sleep(500 * time.Millisecond)
	px.restart(t)
	var out bytes.Buffer
	var last uint64 = 1
	jumped := false
	for {
		ev := c.nextEvent()
		if ev.seq <= last {
			t.Fatalf("seq %d after %d", ev.seq, last)
		}
		jumped = jumped || ev.seq > last+1
		last = ev.seq
		out.Write(ev.data)
		if ev.method == protocol.MethodProcessExited && ev.exit != 0 {
			t.Fatalf("exit %d", ev.exit)
		}
		if ev.method == protocol.MethodProcessClosed {
			break
		}
	}
	if !jumped || !strings.HasSuffix(out.String(), "100000\nlast\n") || strings.HasPrefix(out.String(), "1\n2\n") {
		t.Fatalf("jumped %v, %d bytes ending %q", jumped, out.Len(), out.String()[max(0, out.Len()-20):])
	}
}

func TestOriginAndTokenAreChecked(t *testing.T) {
	up := direct(t, nil)
	_, url := startBridge(t, up, func(c *bridge.Config) { c.Token = "s3cret" })
	httpURL := "http://" + strings.TrimPrefix(url, "ws://")
	for _, c := range []struct {
		header http.Header
		want   int
	}{
		{http.Header{"Authorization": {"Bearer s3cret"}, "Origin": {"https://evil.example"}}, http.StatusForbidden},
		{http.Header{}, http.StatusUnauthorized},
		{http.Header{"Authorization": {"Bearer wrong"}}, http.StatusUnauthorized},
	} {
		_, resp, err := websocket.Dial(ctxT(t), url, &websocket.DialOptions{HTTPHeader: c.header})
		if err == nil || resp == nil || resp.StatusCode != c.want {
			t.Fatalf("%v: err %v resp %v, want %d", c.header, err, resp, c.want)
		}
	}
	resp, err := http.Get(httpURL + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("readyz %v %v", resp, err)
	}
	resp.Body.Close()
	c := dialCodex(t, url, http.Header{"Authorization": {"Bearer s3cret"}})
	c.initialize("")
}

// codex 0.171's --ws-token-sha256: the bridge holds only the token's
// digest; the scheme is matched without regard to case, as codex does.
func TestTokenDigestIsChecked(t *testing.T) {
	up := direct(t, nil)
	sum := sha256.Sum256([]byte("s3cret"))
	_, url := startBridge(t, up, func(c *bridge.Config) { c.TokenSHA256 = sum[:] })
	for _, h := range []string{"", "Bearer s3cre", "Bearer s3cret2", "Basic s3cret"} {
		_, resp, err := websocket.Dial(ctxT(t), url, &websocket.DialOptions{HTTPHeader: http.Header{"Authorization": {h}}})
		if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%q: err %v resp %v, want 401", h, err, resp)
		}
	}
	c := dialCodex(t, url, http.Header{"Authorization": {"bearer s3cret"}})
	c.initialize("")
}

// initialize answers as codex 0.171's server does: a UUID session id and
// the executor's environment info, its paths as file: URIs, so codex does
// not ask environment/info.
func TestInitializeCarriesTheExecutorsEnvironmentInfo(t *testing.T) {
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		var res struct {
			SessionID       string                    `json:"sessionId"`
			EnvironmentInfo *protocol.EnvironmentInfo `json:"environmentInfo"`
		}
		c.ok("initialize", map[string]any{"clientName": "codex-test"}, &res)
		if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`).MatchString(res.SessionID) {
			t.Errorf("session id %q is not a UUID", res.SessionID)
		}
		info := res.EnvironmentInfo
		if info == nil {
			t.Fatal("initialize carries no environmentInfo")
		}
		for name, u := range map[string]string{"cwd": info.Cwd, "userHomeDir": info.UserHomeDir, "tempDir": info.TempDir} {
			if !strings.HasPrefix(u, "file:///") {
				t.Errorf("%s = %q, want a file: URI", name, u)
			}
		}
		if info.Shell.Path == "" || info.PlatformOS == "" {
			t.Errorf("incomplete environment info: %+v", info)
		}
	})
}

// Every method the bridge does not serve itself is forwarded as codex
// wrote it: fs/hash appears nowhere in the bridge, and its params and
// result pass through unchanged — as does an executor's error with its
// kind.
func TestMethodsTheBridgeDoesNotKnowPassThrough(t *testing.T) {
	topologies(t, func(t *testing.T, up *upstream) {
		_, url := startBridge(t, up, nil)
		c := dialCodex(t, url, nil)
		c.initialize("")
		f := filepath.Join(t.TempDir(), "f")
		if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
			t.Fatal(err)
		}
		var h map[string]any
		c.ok("fs/hash", map[string]any{"path": "file://" + f}, &h)
		sum := sha256.Sum256([]byte("hello"))
		if fmt.Sprint(h["size"]) != "5" || !strings.Contains(fmt.Sprint(h), hex.EncodeToString(sum[:])) {
			t.Errorf("fs/hash through the bridge: %v", h)
		}
		if e := c.fails("fs/hash", map[string]any{"path": "file://" + f + ".missing"}); e.Code != protocol.CodeNotFound || protocol.KindOf(e) != protocol.KindNotFound {
			t.Errorf("missing file: %+v", e)
		}
	})
}

func TestCloseEndsEverythingAndLeavesNoGoroutines(t *testing.T) {
	up := direct(t, nil)
	b, err := bridge.New(bridge.Config{Logger: zaptest.NewLogger(t), Dial: func(ctx context.Context, _ string) (*client.Remote, error) {
		return client.Dial(ctx, up.url, up.opts)
	}})
	if err != nil {
		t.Fatal(err)
	}
	l, err := b.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	// A detached session with a running process, and an attached one with
	// a running process and a long poll in flight.
	c1 := dialCodex(t, l.URL(), nil)
	c1.initialize("")
	var detachedProc protocol.StartResult
	c1.ok("process/start", startParams("d", "sleep", "60"), &detachedProc)
	c1.ws.Close(websocket.StatusNormalClosure, "")
	waitFor(t, func() bool { return b.Stats().Detached == 1 })
	c2 := dialCodex(t, l.URL(), nil)
	c2.initialize("")
	var attachedProc protocol.StartResult
	c2.ok("process/start", startParams("a", "sleep", "60"), &attachedProc)
	c2.mu.Lock()
	c2.next++
	id := c2.next
	c2.mu.Unlock()
	c2.send(map[string]any{"id": id, "method": "process/read", "params": map[string]any{"processId": "a", "afterSeq": 5, "waitMs": 60000}})

	l.Close()
	b.Close()
	if st := b.Stats(); st != (bridge.Stats{}) {
		t.Fatalf("after Close: %+v", st)
	}
	// Their processes were terminated on the executor.
	for _, pid := range []int{detachedProc.Pid, attachedProc.Pid} {
		waitFor(t, func() bool { return !procgroup.Alive(pid) })
	}
	select {
	case <-c2.done:
	case <-time.After(testTimeout):
		t.Fatal("the attached connection stayed open")
	}
	waitFor(t, func() bool {
		buf := make([]byte, 1<<20)
		return !bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("outpost/bridge."))
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
