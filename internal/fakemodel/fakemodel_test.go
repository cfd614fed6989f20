package fakemodel

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// unifiedTools is the tools list codex 0.145.0 sends.
var unifiedTools = []any{
	map[string]any{"type": "function", "name": "exec_command"},
	map[string]any{"type": "function", "name": "write_stdin"},
}

// ask POSTs a request as codex does and returns the streamed events' data,
// in order.
func ask(t *testing.T, m *Model, body map[string]any) []map[string]any {
	t.Helper()
	b, _ := json.Marshal(body)
	resp, err := http.Post(m.BaseURL()+"/responses", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	var events []map[string]any
	sc := bufio.NewScanner(resp.Body)
	var name string
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "event: "); ok {
			name = v
			continue
		}
		if v, ok := strings.CutPrefix(line, "data: "); ok {
			var ev map[string]any
			if err := json.Unmarshal([]byte(v), &ev); err != nil {
				t.Fatalf("event data %q: %v", v, err)
			}
			if ev["type"] != name {
				t.Fatalf("event %q carries type %v", name, ev["type"])
			}
			events = append(events, ev)
		}
	}
	return events
}

// item is the output item of an answer, checking the event sequence.
func item(t *testing.T, events []map[string]any) map[string]any {
	t.Helper()
	var types []string
	for i, ev := range events {
		types = append(types, ev["type"].(string))
		if ev["sequence_number"] != float64(i) {
			t.Fatalf("event %d has sequence_number %v", i, ev["sequence_number"])
		}
	}
	want := []string{"response.created", "response.output_item.added", "response.output_item.done", "response.completed"}
	if !slices.Equal(types, want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	return events[2]["item"].(map[string]any)
}

func output(callID, text string) map[string]any {
	return map[string]any{"type": "function_call_output", "call_id": callID, "output": text}
}

func TestScriptedConversation(t *testing.T) {
	var seen *ToolOutput
	m := Start([]Step{
		{Exec: &ExecCall{Cmd: "cat", TTY: true, YieldMs: 250, Workdir: "/w", Extra: map[string]any{"justification": "why"}}},
		{Before: func(prev *ToolOutput) error { seen = prev; return nil }, Stdin: &StdinCall{Chars: "x\n", YieldMs: 1000}},
	})
	defer m.Close()
	if !strings.HasPrefix(m.BaseURL(), "http://127.0.0.1:") || !strings.HasSuffix(m.BaseURL(), "/v1") {
		t.Fatalf("BaseURL %q", m.BaseURL())
	}

	input := []any{map[string]any{"type": "message", "role": "user", "content": "Follow the script."}}
	it := item(t, ask(t, m, map[string]any{"stream": true, "tools": unifiedTools, "input": input}))
	if it["type"] != "function_call" || it["name"] != "exec_command" || it["call_id"] != "call_0" {
		t.Fatalf("first answer %v", it)
	}
	var args map[string]any
	if err := json.Unmarshal([]byte(it["arguments"].(string)), &args); err != nil {
		t.Fatalf("arguments are not a JSON string: %v", it["arguments"])
	}
	wantArgs := map[string]any{"cmd": "cat", "tty": true, "yield_time_ms": float64(250), "workdir": "/w", "justification": "why"}
	if len(args) != len(wantArgs) {
		t.Fatalf("arguments %v, want %v", args, wantArgs)
	}
	for k, v := range wantArgs {
		if args[k] != v {
			t.Fatalf("arguments %v, want %v", args, wantArgs)
		}
	}

	input = append(input, it, output("call_0", "Chunk ID: 1\nProcess running with session ID 7\nOutput:\nready\n"))
	it = item(t, ask(t, m, map[string]any{"stream": true, "tools": unifiedTools, "input": input}))
	if it["name"] != "write_stdin" {
		t.Fatalf("second answer %v", it)
	}
	json.Unmarshal([]byte(it["arguments"].(string)), &args)
	if args["session_id"] != float64(7) || args["chars"] != "x\n" || args["yield_time_ms"] != float64(1000) {
		t.Fatalf("write_stdin arguments %v", args)
	}
	if seen == nil || seen.SessionID != 7 || seen.Tool != "exec_command" || seen.Output != "ready\n" {
		t.Fatalf("Before saw %s", seen)
	}

	input = append(input, it, output("call_1", "Process exited with code 3\nOutput:\nx\n"))
	it = item(t, ask(t, m, map[string]any{"stream": true, "tools": unifiedTools, "input": input}))
	if it["type"] != "message" || it["content"].([]any)[0].(map[string]any)["text"] != "done" {
		t.Fatalf("final answer %v", it)
	}
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
	if n := len(m.Requests()); n != 3 {
		t.Fatalf("%d requests recorded", n)
	}
	outs := m.ToolOutputs()
	if len(outs) != 2 || outs[1].Tool != "write_stdin" || !outs[1].Exited || outs[1].ExitCode != 3 || outs[1].Output != "x\n" || outs[0].CallID != "call_0" {
		t.Fatalf("tool outputs %v", outs)
	}

	// The same script again, as a second `codex exec` would: the model
	// answers by the conversation, not by how often it was asked.
	it = item(t, ask(t, m, map[string]any{"stream": true, "tools": unifiedTools, "input": input[:1]}))
	if it["name"] != "exec_command" {
		t.Fatalf("a new conversation got %v", it)
	}
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestOlderShellTools(t *testing.T) {
	for _, c := range []struct {
		tool string
		want any
	}{
		{"shell_command", "echo hi"},
		{"shell", []any{"bash", "-lc", "echo hi"}},
	} {
		m := Start([]Step{{Exec: &ExecCall{Cmd: "echo hi"}}})
		tools := []any{map[string]any{"type": "function", "name": c.tool}}
		it := item(t, ask(t, m, map[string]any{"stream": true, "tools": tools}))
		var args map[string]any
		json.Unmarshal([]byte(it["arguments"].(string)), &args)
		if it["name"] != c.tool || !jsonEqual(args["command"], c.want) {
			t.Errorf("%s: %v", c.tool, it)
		}
		m.Close()
	}
}

func jsonEqual(a, b any) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return bytes.Equal(x, y)
}

func TestWhatGoesAgainstTheScriptIsRecorded(t *testing.T) {
	m := Start([]Step{
		{Before: func(*ToolOutput) error { return errors.New("not yet") }, Exec: &ExecCall{Cmd: "x", TTY: true}},
	})
	defer m.Close()
	// No stream, and no tool that can run a tty command.
	tools := []any{map[string]any{"type": "function", "name": "shell"}}
	it := item(t, ask(t, m, map[string]any{"tools": tools}))
	if it["type"] != "message" {
		t.Fatalf("answer %v", it)
	}
	// Past the end of the script.
	input := []any{output("a", "1"), output("b", "2")}
	item(t, ask(t, m, map[string]any{"stream": true, "input": input}))
	resp, err := http.Get(m.BaseURL() + "/models")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Fatalf("GET /v1/models: %s", resp.Status)
	}
	msg := m.Err().Error()
	for _, want := range []string{"without stream", "not yet", "no shell tool", "asked the model 3 times; the script has 2 steps", "unexpected model request GET /v1/models"} {
		if !strings.Contains(msg, want) {
			t.Errorf("errors %q lack %q", msg, want)
		}
	}
}

func TestParseToolOutput(t *testing.T) {
	for _, c := range []struct {
		text          string
		exited        bool
		code, session int
		out           string
	}{
		{"Chunk ID: a\nWall time: 0.1 seconds\nProcess exited with code 0\nOriginal token count: 1\nOutput:\nhi\n", true, 0, 0, "hi\n"},
		{"Process exited with code -1\nOutput:\n", true, -1, 0, ""},
		{"Process running with session ID 12\nOutput:\npartial", false, 0, 12, "partial"},
		{"exec_command failed: no such thing", false, 0, 0, "exec_command failed: no such thing"},
	} {
		o := ParseToolOutput(c.text)
		if o.Exited != c.exited || o.ExitCode != c.code || o.SessionID != c.session || o.Output != c.out || o.Text != c.text {
			t.Errorf("%q: %+v", c.text, o)
		}
	}
	for _, v := range []any{
		[]any{map[string]any{"type": "input_text", "text": "a"}, map[string]any{"text": "b"}},
		map[string]any{"content": "ab"},
	} {
		if s := outputText(v); s != "ab" {
			t.Errorf("outputText(%v) = %q", v, s)
		}
	}
}

func TestCodexEnv(t *testing.T) {
	t.Setenv("CODEX_HOME", "/somewhere/else")
	t.Setenv("OPENAI_API_KEY", "sk-real")
	home := filepath.Join(t.TempDir(), "codex-home")
	env, err := CodexEnv(home, "http://127.0.0.1:1/v1", "ws://127.0.0.1:2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(home, "config.toml"))
	if err != nil || !strings.Contains(string(b), `base_url = "http://127.0.0.1:1/v1"`) || !strings.Contains(string(b), `env_key = "`+KeyEnv+`"`) {
		t.Fatalf("config.toml %q %v", b, err)
	}
	has := func(kv string) bool { return slices.Contains(env, kv) }
	if !has("CODEX_HOME="+home) || !has("CODEX_EXEC_SERVER_URL=ws://127.0.0.1:2") || !has(KeyEnv+"=not-a-real-key") {
		t.Fatalf("env %v", env)
	}
	for _, kv := range env {
		if kv == "CODEX_HOME=/somewhere/else" || strings.HasPrefix(kv, "OPENAI_") {
			t.Fatalf("the caller's %s leaked", kv)
		}
	}
	env, _ = CodexEnv(home, "http://127.0.0.1:1/v1", "")
	for _, kv := range env {
		if strings.HasPrefix(kv, "CODEX_EXEC_SERVER_URL=") {
			t.Fatalf("CODEX_EXEC_SERVER_URL set without an exec-server: %s", kv)
		}
	}
	argv := CodexExecArgs("/ws", "-s", "read-only")
	if argv[0] != "exec" || !slices.Contains(argv, "/ws") || argv[len(argv)-3] != "-s" || argv[len(argv)-1] != "Follow the script." {
		t.Fatalf("argv %v", argv)
	}
}
