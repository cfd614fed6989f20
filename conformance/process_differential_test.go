package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/sandbox"
)

// decodePrefix is what outpost's params decoder puts before a decoding
// error's words (executor/conn.go decode); codex sends the words alone.
// The comparison below allows it, and nothing else.
const decodePrefix = "invalid params for process/start: "

const proxyFields = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"allowLocalBinding":false`

// startCase is one process/start whose answer outpost and codex 0.171
// must share; extra is JSON laid over a valid start of `true`.
type startCase struct{ name, extra string }

var sharedStartCases = []startCase{
	// metadata: codex's ExecMetadata, threadId a UUID.
	{"metadata number", `"metadata":5`},
	{"metadata string", `"metadata":"s"`},
	{"metadata as sequence", `"metadata":[1]`},
	{"metadata empty", `"metadata":{}`},
	{"metadata null", `"metadata":null`},
	{"metadata unknown field", `"metadata":{"zzz":5}`},
	{"metadata toolCallId number", `"metadata":{"toolCallId":5}`},
	{"metadata toolCallId bool", `"metadata":{"toolCallId":true}`},
	{"metadata threadId not a uuid", `"metadata":{"threadId":"t","toolCallId":"c"}`},
	{"metadata threadId short", `"metadata":{"threadId":"abc"}`},
	{"metadata threadId group", `"metadata":{"threadId":"0000000-00000-4000-8000-000000000000"}`},
	{"metadata threadId groups", `"metadata":{"threadId":"00000000-0000-4000-8000"}`},
	{"metadata threadId last group", `"metadata":{"threadId":"urn:uuid:00000000-0000-4000-8000-0000000000000"}`},
	{"metadata threadId bad char", `"metadata":{"threadId":"00000000-0000-4000-8000-00000000000g"}`},
	{"metadata threadId multibyte", `"metadata":{"threadId":"0000000é-0000-4000-8000-000000000000"}`},
	{"metadata threadId uuid", `"metadata":{"threadId":"00000000-0000-4000-8000-000000000000","toolCallId":"c"}`},
	{"metadata threadId braced", `"metadata":{"threadId":"{00000000-0000-4000-8000-000000000000}"}`},
	{"metadata threadId simple", `"metadata":{"threadId":"00000000000040008000000000000000"}`},
	// shellSnapshot: codex's ShellSnapshotRequest.
	{"shellSnapshot number", `"shellSnapshot":1`},
	{"shellSnapshot empty", `"shellSnapshot":{}`},
	{"shellSnapshot no shell", `"shellSnapshot":{"scopeId":"x"}`},
	{"shellSnapshot scopeId null", `"shellSnapshot":{"scopeId":null,"shell":{"name":"b","path":"p"}}`},
	{"shellSnapshot shell path missing", `"shellSnapshot":{"scopeId":"x","shell":{"name":"b"}}`},
	{"shellSnapshot as short sequence", `"shellSnapshot":["x"]`},
	{"shellSnapshot null", `"shellSnapshot":null`},
	// networkProxy: codex's RemoteNetworkProxyLaunchConfig.
	{"networkProxy number", `"networkProxy":2`},
	{"networkProxy empty", `"networkProxy":{}`},
	{"networkProxy empty sequence", `"networkProxy":[]`},
	{"networkProxy proxy empty", `"networkProxy":{"proxy":{}}`},
	{"networkProxy enabled number", `"networkProxy":{"proxy":{"enabled":5}}`},
	{"networkProxy enabled only", `"networkProxy":{"proxy":{"enabled":true}}`},
	{"networkProxy no mode", `"networkProxy":{"proxy":{` + proxyFields + `}}`},
	{"networkProxy mode unknown", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"x"}}`},
	{"networkProxy mode map", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":{}}}`},
	{"networkProxy mode unit value", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":{"full":1}}}`},
	{"networkProxy domains sequence", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full","domains":[]}}`},
	{"networkProxy domain permission", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full","domains":{"a":"x"}}}`},
	{"networkProxy unixSockets number", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full","unixSockets":5}}`},
	{"networkProxy unix socket permission", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full","unixSockets":{"/a":7}}}`},
	{"networkProxy auditMetadata", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full"},"auditMetadata":{"model":5}}`},
	{"networkProxy timeout string", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full"},"policyDecisionTimeoutMs":"5"}`},
	{"networkProxy timeout negative", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full"},"policyDecisionTimeoutMs":-1}`},
	{"networkProxy disabled", `"networkProxy":{"proxy":{` + strings.Replace(proxyFields, `"enabled":true`, `"enabled":false`, 1) + `,"mode":"full"}}`},
	{"networkProxy timeout zero", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full"},"policyDecisionTimeoutMs":0}`},
	{"networkProxy null", `"networkProxy":null`},
	// The first bad option in document order is the one named.
	{"first bad option named", `"networkProxy":{},"metadata":5`},
}

// Well-formed requests codex 0.171's server honours and outpost refuses
// (kind unsupported), running nothing: it launches no proxy and restores
// no shell snapshot.
var refusedStartCases = []startCase{
	{"networkProxy enabled", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"full"}}`},
	{"networkProxy limited with domains", `"networkProxy":{"proxy":{` + proxyFields + `,"mode":"limited","domains":{"example.com":"allow"}},"policyDecisionTimeoutMs":5000}`},
	{"shellSnapshot", `"shellSnapshot":{"scopeId":"s","shell":{"name":"bash","path":"/bin/bash"}}`},
}

// readyWire is a connection past initialize and initialized.
func readyWire(t *testing.T, url string) *wire {
	w := dial(t, url)
	if r := w.call("initialize", map[string]any{"clientName": "process-diff"}); r["error"] != nil {
		t.Fatalf("%s: initialize: %v", url, r)
	}
	w.notify("initialized")
	return w
}

// startWith sends a process/start of `sh -c script` in dir with extra
// added to its params, and renders the reply for comparison: an error as
// code and words (outpost's decodePrefix removed), a result as its codex
// fields (outpost's pid left out) and the process's exit notification.
func startWith(t *testing.T, w *wire, pid, dir, script, extra string) (string, map[string]any) {
	t.Helper()
	raw := fmt.Sprintf(`{"processId":%q,"argv":["/bin/sh","-c",%q],"cwd":%q,"env":{"PATH":"/usr/bin:/bin"},"tty":false,%s}`,
		pid, script, "file://"+dir, extra)
	if !json.Valid([]byte(raw)) {
		t.Fatalf("bad params %s", raw)
	}
	// Sent as written: key order and duplicate keys matter.
	w.id++
	w.sendRaw(fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"process/start","params":%s}`, w.id, raw))
	var reply map[string]any
	for reply == nil {
		m := w.recv()
		if _, ok := m["method"]; ok {
			w.notes = append(w.notes, m)
		} else {
			reply = m
		}
	}
	if e, ok := reply["error"].(map[string]any); ok {
		return fmt.Sprintf("error:%v:%s", e["code"], strings.TrimPrefix(fmt.Sprint(e["message"]), decodePrefix)), reply
	}
	res := reply["result"].(map[string]any)
	var exited string
	for _, m := range w.untilClosed(pid) {
		if m["method"] == "process/exited" {
			b, _ := json.Marshal(params(m))
			exited = strings.ReplaceAll(string(b), pid, "PID")
		}
	}
	return fmt.Sprintf("result:sandboxType=%v exited=%s", res["sandboxType"], exited), reply
}

func startCodexAt(t *testing.T, version string) *peers.Server {
	bin, err := peers.CodexBinaryAt(version)
	if err != nil {
		testdeps.Missing(t, "codex", "skipping: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	s, err := peers.StartCodex(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func startOurs(t *testing.T) *peers.Server {
	bin := outpostBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	s, err := peers.StartOutpost(ctx, bin)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// TestProcessStartDifferentialAgainstCodex sends codex 0.171's own
// process/start options, well- and ill-formed, to codex's exec-server and
// outpost's, and compares the answers: the same code and words for every
// refusal, the same result fields (sandboxType) and the same
// process/exited (sandboxDenied always present) for every start.
func TestProcessStartDifferentialAgainstCodex(t *testing.T) {
	if _, err := peers.CodexBinary(); err != nil {
		testdeps.Missing(t, "codex", "skipping: %v", err)
	}
	theirs := startCodexAt(t, peers.CodexVersion)
	ours := startOurs(t)
	o, c := readyWire(t, ours.URL), readyWire(t, theirs.URL)

	for i, tc := range sharedStartCases {
		pid := fmt.Sprintf("c%d", i)
		a, _ := startWith(t, o, pid, t.TempDir(), "touch marker", tc.extra)
		b, _ := startWith(t, c, pid, t.TempDir(), "touch marker", tc.extra)
		if a != b {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", tc.name, a, b)
		} else {
			t.Logf("%s: %s", tc.name, a)
		}
	}

	for i, tc := range refusedStartCases {
		pid := fmt.Sprintf("r%d", i)
		ourDir, theirDir := t.TempDir(), t.TempDir()
		b, _ := startWith(t, c, pid, theirDir, "touch marker", tc.extra)
		_, reply := startWith(t, o, pid, ourDir, "touch marker", tc.extra)
		e, _ := reply["error"].(map[string]any)
		data, _ := e["data"].(map[string]any)
		if e == nil || data["kind"] != "unsupported" {
			t.Errorf("%s: outpost answered %v; want a refusal of kind unsupported (codex: %s)", tc.name, reply, b)
		}
		if _, err := os.Stat(filepath.Join(ourDir, "marker")); err == nil {
			t.Errorf("%s: outpost ran the command", tc.name)
		}
		if _, err := os.Stat(filepath.Join(theirDir, "marker")); err != nil {
			t.Logf("%s: codex did not run it either (%s)", tc.name, b)
		}
	}

	// sandboxType names the sandbox as codex does: none without a policy,
	// linuxSeccomp for a policy the Linux helper enforces.
	a, _ := startWith(t, o, "plain", t.TempDir(), "true", `"pipeStdin":false`)
	b, _ := startWith(t, c, "plain", t.TempDir(), "true", `"pipeStdin":false`)
	if a != b || !strings.Contains(a, "sandboxType=none") {
		t.Errorf("no sandbox:\n  outpost: %s\n  codex:   %s", a, b)
	}
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeReadOnly}); err != nil {
		testdeps.Missing(t, "sandbox", "skipping the sandboxed start: %v", err)
	}
	ws := t.TempDir()
	sb, _ := json.Marshal(codexSandbox("workspace-write", ws))
	a, _ = startWith(t, o, "sandboxed", ws, "echo x > inside", `"sandbox":`+string(sb))
	b, _ = startWith(t, c, "sandboxed", ws, "echo x > inside", `"sandbox":`+string(sb))
	if a != b || !strings.Contains(a, "sandboxType=linuxSeccomp") {
		t.Errorf("workspace-write:\n  outpost: %s\n  codex:   %s", a, b)
	}
}

// TestProcessExitedCarriesSandboxDeniedOnEveryCodex: codex 0.145 and 0.171
// both send sandboxDenied in every process/exited, false when not denied;
// so does outpost. (0.145 sends no sandboxType in the start result and
// ignores metadata and shellSnapshot; outpost follows 0.171 there.)
func TestProcessExitedCarriesSandboxDeniedOnEveryCodex(t *testing.T) {
	ours := startOurs(t)
	for _, version := range []string{"0.145.0", peers.CodexVersion} {
		t.Run(version, func(t *testing.T) {
			theirs := startCodexAt(t, version)
			o, c := readyWire(t, ours.URL), readyWire(t, theirs.URL)
			for i, script := range []string{"exit 0", "exit 3"} {
				pid := fmt.Sprintf("x%d", i)
				a, _ := startWith(t, o, pid, t.TempDir(), script, `"pipeStdin":false`)
				b, _ := startWith(t, c, pid, t.TempDir(), script, `"pipeStdin":false`)
				exitedOf := func(s string) string { _, e, _ := strings.Cut(s, "exited="); return e }
				if exitedOf(a) != exitedOf(b) || !strings.Contains(a, `"sandboxDenied":false`) {
					t.Errorf("%s:\n  outpost: %s\n  codex:   %s", script, a, b)
				}
			}
		})
	}
}

// Read, write, signal and terminate refuse ill-typed params with codex's
// code (their words are encoding/json's; outpost's extensions, such as
// more signals and an optional writeId, are deliberate and not compared).
func TestProcessMethodsRefuseIllTypedParamsLikeCodex(t *testing.T) {
	if _, err := peers.CodexBinary(); err != nil {
		testdeps.Missing(t, "codex", "skipping: %v", err)
	}
	theirs := startCodexAt(t, peers.CodexVersion)
	ours := startOurs(t)
	o, c := readyWire(t, ours.URL), readyWire(t, theirs.URL)
	calls := []struct {
		method string
		params map[string]any
	}{
		{"process/read", map[string]any{"processId": 5}},
		{"process/read", map[string]any{"processId": "p", "afterSeq": "x"}},
		{"process/read", map[string]any{"processId": "p", "afterSeq": -1}},
		{"process/read", map[string]any{}},
		{"process/write", map[string]any{"processId": "p", "chunk": "!!", "writeId": "w"}},
		{"process/write", map[string]any{"processId": 5, "chunk": "", "writeId": "w"}},
		{"process/signal", map[string]any{"processId": "p", "signal": 5}},
		{"process/terminate", map[string]any{}},
		{"process/terminate", map[string]any{"processId": true}},
	}
	for _, call := range calls {
		a, b := code(o.call(call.method, call.params)), code(c.call(call.method, call.params))
		if a != b {
			t.Errorf("%s %v: outpost %s, codex %s", call.method, call.params, a, b)
		}
	}
}
