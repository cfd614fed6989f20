package executor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// wantKind checks an error reply's code and its data.kind on the wire.
func (r *rawClient) wantKind(what string, m map[string]any, code int, kind protocol.Kind) {
	r.t.Helper()
	e, ok := m["error"].(map[string]any)
	if !ok {
		r.t.Errorf("%s: want error %d/%s, got %v", what, code, kind, m)
		return
	}
	data, _ := e["data"].(map[string]any)
	if int(e["code"].(float64)) != code || data["kind"] != string(kind) {
		r.t.Errorf("%s: error %v, want code %d kind %s", what, e, code, kind)
	}
}

// Every error the executor sends says what it means in data.kind, beside
// codex's code: callers decide by it, never by the message.
func TestEveryErrorCarriesItsKind(t *testing.T) {
	ts := newTestServer(t, func(c *Config) {
		c.MaxProcessesPerSession = 2
		c.MaxFileHandles = 1
		c.MaxSessions = 2
		c.MaxFileBytes = 4
		// A machine that can enforce nothing: every sandbox is refused.
		c.SandboxCaps = func() sandbox.Capabilities { return sandbox.Capabilities{} }
	}, WSConfig{})
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "five"), []byte("12345"), 0o644)
	os.WriteFile(filepath.Join(dir, "one"), []byte("1"), 0o644)

	r := dialRaw(t, ts.url, nil)
	r.wantKind("call before initialize", r.call("process/read", map[string]any{"processId": "x"}), protocol.CodeInvalidRequest, protocol.KindInvalid)
	r.wantKind("resume of an unknown session", r.call("initialize", map[string]any{"clientName": "t", "resumeSessionId": "00000000-0000-4000-8000-000000000000"}), protocol.CodeInvalidRequest, protocol.KindUnknownSession)
	sid := r.init()
	r.wantKind("second initialize", r.call("initialize", map[string]any{"clientName": "t"}), protocol.CodeInvalidRequest, protocol.KindInvalid)
	r.wantKind("unknown method", r.call("process/teleport", map[string]any{}), protocol.CodeMethodNotFound, protocol.KindUnsupported)
	r.wantKind("missing params", r.call("process/start", nil), protocol.CodeInvalidParams, protocol.KindInvalid)

	// process/*
	r.wantKind("read of an unknown process", r.call("process/read", map[string]any{"processId": "nope"}), protocol.CodeInvalidRequest, protocol.KindNotFound)
	r.wantKind("resize of an unknown process", r.call("process/resize", map[string]any{"processId": "nope", "rows": 1, "cols": 1}), protocol.CodeInvalidRequest, protocol.KindNotFound)
	r.wantKind("program at a missing path", r.call("process/start", startParams("a", "/nonexistent/bin")), protocol.CodeInternal, protocol.KindNotFound)
	noProgram := r.call("process/start", startParams("b", "no-such-program-7f3a"))
	r.wantKind("program in no PATH directory", noProgram, protocol.CodeInternal, protocol.KindNotFound)
	if e, _ := noProgram["error"].(map[string]any); e != nil {
		if data, _ := e["data"].(map[string]any); data["param"] != nil {
			t.Errorf("missing program: data %v names a param", data)
		}
	}
	p := startParams("c", "true")
	p["cwd"] = filepath.Join(dir, "missing")
	missingCwd := r.call("process/start", p)
	r.wantKind("missing cwd", missingCwd, protocol.CodeInvalidParams, protocol.KindNotFound)
	// Both not_found: the param says it is the working directory, so a
	// client can say so (and outpost exec exit 119, not 127).
	if e, _ := missingCwd["error"].(map[string]any); e != nil {
		if data, _ := e["data"].(map[string]any); data["param"] != protocol.ParamCwd {
			t.Errorf("missing cwd: data %v, want param %q", data, protocol.ParamCwd)
		}
	}
	p = startParams("c", "true")
	p["sandbox"] = map[string]any{"mode": "no-such-mode"}
	r.wantKind("bad sandbox", r.call("process/start", p), protocol.CodeInvalidParams, protocol.KindInvalid)
	p = startParams("c", "true")
	p["sandbox"] = map[string]any{"mode": "read-only"}
	r.wantKind("sandbox not enforceable", r.call("process/start", p), protocol.CodeInvalidRequest, protocol.KindUnsupported)
	p = startParams("c", "true")
	p["enforceManagedNetwork"] = true
	r.wantKind("managed network", r.call("process/start", p), protocol.CodeInvalidRequest, protocol.KindUnsupported)
	r.result("process/start", startParams("s1", "sleep", "60"))
	r.wantKind("duplicate process id", r.call("process/start", startParams("s1", "true")), protocol.CodeInvalidRequest, protocol.KindInvalid)
	r.wantKind("resize of a pipe process", r.call("process/resize", map[string]any{"processId": "s1", "rows": 1, "cols": 1}), protocol.CodeInvalidRequest, protocol.KindInvalid)
	r.result("process/start", startParams("s2", "sleep", "60"))
	r.wantKind("process table full", r.call("process/start", startParams("s3", "true")), protocol.CodeInvalidRequest, protocol.KindExhausted)
	r.wantKind("unknown signal", r.call("process/signal", map[string]any{"processId": "s1", "signal": "explode"}), protocol.CodeInvalidParams, protocol.KindInvalid)

	// fs/*
	r.wantKind("missing file", r.call("fs/readFile", map[string]any{"path": filepath.Join(dir, "missing")}), protocol.CodeNotFound, protocol.KindNotFound)
	r.wantKind("file past the whole-file limit", r.call("fs/readFile", map[string]any{"path": filepath.Join(dir, "five")}), protocol.CodeInvalidRequest, protocol.KindTooLarge)
	r.wantKind("a directory read as a file", r.call("fs/readFile", map[string]any{"path": dir}), protocol.CodeInvalidRequest, protocol.KindInvalid)
	readOnly := map[string]any{"mode": "read-only", "cwd": dir}
	r.wantKind("write under a read-only policy", r.call("fs/writeFile", map[string]any{"path": filepath.Join(dir, "w"), "dataBase64": "eA==", "sandbox": readOnly}), protocol.CodeInvalidRequest, protocol.KindPermission)
	r.wantKind("unknown handle", r.call("fs/readBlock", map[string]any{"handleId": "h9", "offset": 0, "len": 1}), protocol.CodeNotFound, protocol.KindNotFound)
	r.result("fs/open", map[string]any{"handleId": "h1", "path": filepath.Join(dir, "one")})
	r.wantKind("handle id in use", r.call("fs/open", map[string]any{"handleId": "h1", "path": filepath.Join(dir, "one")}), protocol.CodeInvalidRequest, protocol.KindInvalid)
	r.wantKind("handles exhausted", r.call("fs/open", map[string]any{"handleId": "h2", "path": filepath.Join(dir, "one")}), protocol.CodeInvalidRequest, protocol.KindExhausted)
	r.wantKind("remove /", r.call("fs/remove", map[string]any{"path": "/"}), protocol.CodeInvalidRequest, protocol.KindPermission)

	// sessions
	r2 := dialRaw(t, ts.url, nil)
	r2.wantKind("resume of an attached session", r2.call("initialize", map[string]any{"clientName": "t", "resumeSessionId": sid}), protocol.CodeSessionAlreadyAttached, protocol.KindUnavailable)
	r2.init() // the second session: the executor is full
	r3 := dialRaw(t, ts.url, nil)
	r3.wantKind("sessions exhausted", r3.call("initialize", map[string]any{"clientName": "t"}), protocol.CodeInvalidRequest, protocol.KindExhausted)
}

func TestInitializeRefusesAnotherProtocolVersionAndAnswersItsOwn(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	r := dialRaw(t, ts.url, nil)
	r.wantKind("a newer protocol", r.call("initialize", map[string]any{"clientName": "t", "protocolVersion": protocol.Version + 1}),
		protocol.CodeInvalidRequest, protocol.KindUnsupported)
	res, _ := r.call("initialize", map[string]any{"clientName": "t", "protocolVersion": protocol.Version})["result"].(map[string]any)
	if v, _ := res["protocolVersion"].(float64); int(v) != protocol.Version {
		t.Fatalf("initialize answered %v, want protocolVersion %d", res, protocol.Version)
	}
	// A codex peer sends no version and gets none back.
	r2 := dialRaw(t, ts.url, nil)
	res, _ = r2.call("initialize", map[string]any{"clientName": "codex"})["result"].(map[string]any)
	if _, ok := res["protocolVersion"]; ok || res["sessionId"] == nil {
		t.Fatalf("codex peer got %v", res)
	}
}
