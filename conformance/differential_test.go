// Package conformance holds differential tests: one scenario script run
// against outpost's exec-server and against the real codex exec-server,
// which must observe the same results.
package conformance

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

const stepTimeout = 20 * time.Second

// wire is a raw JSON-RPC lite client: the scenario sees exactly what each
// server sends.
type wire struct {
	t     *testing.T
	url   string
	c     *websocket.Conn
	id    int
	notes []map[string]any
}

func dial(t *testing.T, url string) *wire {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	c, _, err := websocket.Dial(ctx, url, nil)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	c.SetReadLimit(-1)
	t.Cleanup(func() { c.CloseNow() })
	return &wire{t: t, url: url, c: c}
}

func (w *wire) sendRaw(s string) {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if err := w.c.Write(ctx, websocket.MessageText, []byte(s)); err != nil {
		w.t.Fatal(err)
	}
}

func (w *wire) send(v any) {
	b, _ := json.Marshal(v)
	w.sendRaw(string(b))
}

func (w *wire) recv() map[string]any {
	w.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	_, b, err := w.c.Read(ctx)
	if err != nil {
		w.t.Fatalf("%s: read: %v", w.url, err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		w.t.Fatalf("bad JSON %s", b)
	}
	return m
}

func (w *wire) call(method string, params any) map[string]any {
	w.t.Helper()
	w.id++
	id := w.id
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	w.send(msg)
	for {
		m := w.recv()
		if _, ok := m["method"]; ok {
			w.notes = append(w.notes, m)
			continue
		}
		if v, ok := m["id"].(float64); ok && int(v) == id {
			return m
		}
		w.t.Fatalf("unexpected message %v", m)
	}
}

func (w *wire) notify(method string) {
	w.send(map[string]any{"method": method, "params": map[string]any{}})
}

// untilClosed returns pid's notifications through process/closed.
func (w *wire) untilClosed(pid string) []map[string]any {
	w.t.Helper()
	var mine []map[string]any
	rest := w.notes[:0:0]
	for _, m := range w.notes {
		if params(m)["processId"] == pid {
			mine = append(mine, m)
		} else {
			rest = append(rest, m)
		}
	}
	w.notes = rest
	for len(mine) == 0 || mine[len(mine)-1]["method"] != "process/closed" {
		m := w.recv()
		if _, ok := m["method"]; !ok {
			w.t.Fatalf("unexpected reply %v", m)
		}
		if params(m)["processId"] == pid {
			mine = append(mine, m)
		} else {
			w.notes = append(w.notes, m)
		}
	}
	return mine
}

func params(m map[string]any) map[string]any {
	p, _ := m["params"].(map[string]any)
	return p
}

var uuidRE = regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`)

// shape renders a reply as "result:{...}" or "error:CODE:MESSAGE".
func shape(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		return fmt.Sprintf("error:%v:%v", e["code"], e["message"])
	}
	b, _ := json.Marshal(m["result"])
	return "result:" + string(b)
}

// code renders only the error code (for errors whose wording differs).
func code(m map[string]any) string {
	if e, ok := m["error"].(map[string]any); ok {
		return fmt.Sprintf("error:%v", e["code"])
	}
	return "result"
}

// events summarises a process's notifications: output per stream, exit
// code, and the sequence invariants (one counter, closed last).
func events(notes []map[string]any) string {
	streams := map[string]string{}
	var seqs []int
	exit := "none"
	for _, m := range notes {
		p := params(m)
		seqs = append(seqs, int(p["seq"].(float64)))
		switch m["method"] {
		case "process/output":
			data, _ := base64.StdEncoding.DecodeString(p["chunk"].(string))
			streams[p["stream"].(string)] += string(data)
		case "process/exited":
			exit = fmt.Sprint(p["exitCode"])
		}
	}
	sorted := append([]int(nil), seqs...)
	sort.Ints(sorted)
	contiguous := true
	for i, s := range sorted {
		if s != i+1 {
			contiguous = false
		}
	}
	closedLast := len(seqs) > 0 && seqs[len(seqs)-1] == sorted[len(sorted)-1] && notes[len(notes)-1]["method"] == "process/closed"
	keys := make([]string, 0, len(streams))
	for k := range streams {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s=%q ", k, strings.ReplaceAll(streams[k], "\r\n", "\n"))
	}
	fmt.Fprintf(&b, "exit=%s seqs-contiguous=%v closed-last=%v", exit, contiguous, closedLast)
	return b.String()
}

// byStream renders a read's chunks as the bytes of each stream.
func byStream(res map[string]any) string {
	streams := map[string]string{}
	chunks, _ := res["chunks"].([]any)
	for _, c := range chunks {
		cm := c.(map[string]any)
		data, _ := base64.StdEncoding.DecodeString(cm["chunk"].(string))
		streams[cm["stream"].(string)] += string(data)
	}
	return fmt.Sprintf("stdout=%q stderr=%q pty=%q", streams["stdout"], streams["stderr"], streams["pty"])
}

func start(pid string, tty, pipe bool, argv ...string) map[string]any {
	p := map[string]any{"processId": pid, "argv": argv, "cwd": "file:///tmp", "env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": tty}
	if pipe {
		p["pipeStdin"] = true
	}
	return p
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// observation is one step's result, comparable across servers.
type observation struct{ step, value string }

// scenario drives one server through the behaviours both must share and
// returns what it observed.
func scenario(t *testing.T, url string) []observation {
	var obs []observation
	see := func(step, value string) { obs = append(obs, observation{step, value}) }

	w := dial(t, url)
	see("call before initialize", shape(w.call("process/read", map[string]any{"processId": "x"})))
	see("unknown resume id", shape(w.call("initialize", map[string]any{"clientName": "diff", "resumeSessionId": "00000000-0000-4000-8000-000000000000"})))
	init := w.call("initialize", map[string]any{"clientName": "diff"})
	sid, _ := init["result"].(map[string]any)["sessionId"].(string)
	see("initialize returns a UUIDv4", fmt.Sprint(uuidRE.MatchString(sid)))
	see("call before initialized", shape(w.call("environment/info", nil)))
	see("second initialize", shape(w.call("initialize", map[string]any{"clientName": "diff"})))
	w.notify("initialized")
	info := w.call("environment/info", nil)["result"].(map[string]any)
	see("environment/info shape", fmt.Sprintf("shell.name=%v cwd-is-uri=%v", info["shell"].(map[string]any)["name"] != "", strings.HasPrefix(fmt.Sprint(info["cwd"]), "file:///")))

	w.sendRaw(`{"id":42,"method":`)
	m := w.recv()
	see("malformed JSON", fmt.Sprintf("id=%v %s", m["id"], code(m)))
	see("unknown method", code(w.call("foo/bar", nil)))
	see("string id echoed", func() string {
		w.send(map[string]any{"id": "abc", "method": "environment/info", "jsonrpc": "2.0"})
		m := w.recv()
		return fmt.Sprint(m["id"])
	}())

	// outpost adds the pid; the fields codex sends must match.
	startReply := w.call("process/start", start("p1", false, false, "/bin/sh", "-c", "printf out; printf err >&2; exit 7"))
	see("start reply", fmt.Sprint(startReply["result"].(map[string]any)["processId"]))
	see("events out/err/exit 7", events(w.untilClosed("p1")))
	// Two pipes are read independently, so which of stdout and stderr is
	// numbered first is a race on both servers; compare per stream.
	rd := w.call("process/read", map[string]any{"processId": "p1", "afterSeq": 0})["result"].(map[string]any)
	see("read after close", fmt.Sprintf("%s next=%v exited=%v code=%v closed=%v failure=%v denied=%v", byStream(rd), rd["nextSeq"], rd["exited"], rd["exitCode"], rd["closed"], rd["failure"], rd["sandboxDenied"]))
	rd = w.call("process/read", map[string]any{"processId": "p1", "afterSeq": 0, "maxBytes": 0})["result"].(map[string]any)
	chunks := rd["chunks"].([]any)
	see("read maxBytes 0", fmt.Sprintf("chunks=%d next-is-seq+1=%v", len(chunks), len(chunks) == 1 && rd["nextSeq"].(float64) == chunks[0].(map[string]any)["seq"].(float64)+1))
	see("duplicate process id", shape(w.call("process/start", start("p1", false, false, "true"))))
	see("terminate after exit", shape(w.call("process/terminate", map[string]any{"processId": "p1"})))
	see("terminate unknown", shape(w.call("process/terminate", map[string]any{"processId": "nope"})))
	see("read unknown", shape(w.call("process/read", map[string]any{"processId": "nope"})))
	see("write unknown", shape(w.call("process/write", map[string]any{"processId": "nope", "chunk": "", "writeId": "w"})))
	see("signal unknown", shape(w.call("process/signal", map[string]any{"processId": "nope", "signal": "interrupt"})))
	see("empty argv", shape(w.call("process/start", start("e", false, false, []string{}...))))
	see("empty writeId", shape(w.call("process/write", map[string]any{"processId": "p1", "chunk": "", "writeId": ""})))

	see("tty start", fmt.Sprint(w.call("process/start", start("t1", true, false, "/bin/sh", "-c", "read l; echo from-stdin:$l"))["result"].(map[string]any)["processId"]))
	see("tty write", shape(w.call("process/write", map[string]any{"processId": "t1", "chunk": b64("hello\n"), "writeId": "w1"})))
	tty := events(w.untilClosed("t1"))
	see("tty output", fmt.Sprint(strings.Contains(tty, "from-stdin:hello"), strings.Contains(tty, "pty=")))

	w.call("process/start", start("s1", false, true, "/bin/sh", "-c", "read l; echo from-stdin:$l"))
	see("pipeStdin write", shape(w.call("process/write", map[string]any{"processId": "s1", "chunk": b64("hello\n"), "writeId": "w1"})))
	see("duplicate writeId", shape(w.call("process/write", map[string]any{"processId": "s1", "chunk": b64("again\n"), "writeId": "w1"})))
	see("pipeStdin output", events(w.untilClosed("s1")))

	w.call("process/start", start("n1", false, false, "/bin/sh", "-c", "if read l; then echo got:$l; else echo eof; fi"))
	see("write without pipeStdin", shape(w.call("process/write", map[string]any{"processId": "n1", "chunk": b64("hello\n"), "writeId": "w1"})))
	see("child sees EOF", events(w.untilClosed("n1")))

	w.call("process/start", start("g1", false, false, "/bin/sh", "-c", `trap 'echo signal:2; exit 7' INT; echo ready; while :; do sleep 0.01; done`))
	for !strings.Contains(fmt.Sprint(w.notes), "cmVhZHkK") { // "ready\n"
		w.notes = append(w.notes, w.recv())
	}
	see("interrupt", shape(w.call("process/signal", map[string]any{"processId": "g1", "signal": "interrupt"})))
	see("interrupt reaches trap", events(w.untilClosed("g1")))

	dir := t.TempDir()
	gate := filepath.Join(dir, "gate")
	w.call("process/start", start("late", false, false, "/bin/sh", "-c", "(while [ ! -e "+gate+" ]; do sleep 0.01; done; echo late) & echo early"))
	for !strings.Contains(fmt.Sprint(w.notes), "process/exited") {
		w.notes = append(w.notes, w.recv())
	}
	os.WriteFile(gate, nil, 0o600)
	late := w.untilClosed("late")
	exitedAt, lateAt := -1, -1
	for i, m := range late {
		switch m["method"] {
		case "process/exited":
			exitedAt = i
		case "process/output":
			if c, _ := base64.StdEncoding.DecodeString(params(m)["chunk"].(string)); strings.Contains(string(c), "late") {
				lateAt = i
			}
		}
	}
	see("late grandchild output after exit", fmt.Sprintf("%s late-after-exit=%v", events(late), exitedAt >= 0 && exitedAt < lateAt))

	// Resume: the session outlives its connection.
	w.call("process/start", start("bg", false, false, "/bin/sh", "-c", "echo before; sleep 0.3; echo after"))
	w2 := dial(t, url)
	see("resume while attached", strings.ReplaceAll(shape(w2.call("initialize", map[string]any{"clientName": "diff", "resumeSessionId": sid})), sid, "SID"))
	w.c.Close(websocket.StatusNormalClosure, "")
	var resumed map[string]any
	for deadline := time.Now().Add(stepTimeout); ; time.Sleep(10 * time.Millisecond) {
		w3 := dial(t, url)
		resumed = w3.call("initialize", map[string]any{"clientName": "diff", "resumeSessionId": sid})
		if resumed["error"] == nil || time.Now().After(deadline) {
			w = w3
			break
		}
	}
	see("resume after disconnect", fmt.Sprint(resumed["result"].(map[string]any)["sessionId"] == sid))
	w.notify("initialized")
	// Only the bytes are compared: codex 0.145 may number the exit before
	// the last output (a race outpost does not have).
	var got string
	for deadline := time.Now().Add(stepTimeout); ; time.Sleep(20 * time.Millisecond) {
		rd := w.call("process/read", map[string]any{"processId": "bg", "afterSeq": 0, "waitMs": 1000})["result"].(map[string]any)
		got = ""
		for _, c := range rd["chunks"].([]any) {
			data, _ := base64.StdEncoding.DecodeString(c.(map[string]any)["chunk"].(string))
			got += string(data)
		}
		if rd["closed"] == true || time.Now().After(deadline) {
			break
		}
	}
	see("output kept across resume", fmt.Sprintf("%q", got))

	// Files: codex's fs/* methods, field for field.
	fsDir := t.TempDir()
	uri := func(name string) string { return "file://" + filepath.Join(fsDir, name) }
	see("fs/writeFile", shape(w.call("fs/writeFile", map[string]any{"path": uri("a.txt"), "dataBase64": b64("hello fs")})))
	see("fs/readFile", fmt.Sprint(w.call("fs/readFile", map[string]any{"path": uri("a.txt")})["result"]))
	md, _ := w.call("fs/getMetadata", map[string]any{"path": uri("a.txt")})["result"].(map[string]any)
	see("fs/getMetadata", fmt.Sprintf("file=%v dir=%v link=%v size=%v", md["isFile"], md["isDirectory"], md["isSymlink"], md["size"]))
	see("fs/readFile missing", code(w.call("fs/readFile", map[string]any{"path": uri("missing")})))
	see("fs/writeFile bad base64", code(w.call("fs/writeFile", map[string]any{"path": uri("b.txt"), "dataBase64": "%%%"})))
	see("fs/createDirectory", shape(w.call("fs/createDirectory", map[string]any{"path": uri("d/e/f")})))
	see("fs/copy", shape(w.call("fs/copy", map[string]any{"sourcePath": uri("a.txt"), "destinationPath": uri("d/copy.txt"), "recursive": false})))
	see("fs/readDirectory", fmt.Sprint(w.call("fs/readDirectory", map[string]any{"path": uri("d")})["result"]))
	see("fs/open", shape(w.call("fs/open", map[string]any{"handleId": "h1", "path": uri("a.txt")})))
	see("fs/readBlock", fmt.Sprint(w.call("fs/readBlock", map[string]any{"handleId": "h1", "offset": 6, "len": 100})["result"]))
	see("fs/close", shape(w.call("fs/close", map[string]any{"handleId": "h1"})))
	see("fs/readBlock after close", code(w.call("fs/readBlock", map[string]any{"handleId": "h1", "offset": 0, "len": 1})))
	see("fs/remove", shape(w.call("fs/remove", map[string]any{"path": uri("d")})))
	see("fs/getMetadata removed", code(w.call("fs/getMetadata", map[string]any{"path": uri("d")})))

	resp, err := http.Get("http" + strings.TrimPrefix(url, "ws") + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	see("readyz", fmt.Sprint(resp.StatusCode))
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	_, resp, _ = websocket.Dial(ctx, url, &websocket.DialOptions{HTTPHeader: http.Header{"Origin": {"http://127.0.0.1"}}})
	see("origin refused", fmt.Sprint(resp != nil && resp.StatusCode == http.StatusForbidden))
	return obs
}

func TestDifferentialAgainstCodexExecServer(t *testing.T) {
	ours, theirs := bothServers(t)

	a := scenario(t, ours.URL)
	b := scenario(t, theirs.URL)
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, a[i].value, b[i].value)
		} else {
			t.Logf("%s: %s", a[i].step, a[i].value)
		}
	}
}
