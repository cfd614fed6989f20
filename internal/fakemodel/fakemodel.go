// Package fakemodel is a scripted model for end-to-end runs of the real
// `codex exec`: a small HTTP server speaking the OpenAI Responses API as
// codex 0.145.0 uses it, and the throwaway CODEX_HOME that points codex at
// it. The conformance tests and the benchmark harness share it.
//
// codex POSTs {base_url}/responses with "stream": true and the whole
// conversation in "input"; it reads server-sent events and needs, per
// answer, response.created, one or more output items
// (response.output_item.added / response.output_item.done) and
// response.completed. An output item is either a function_call (a tool
// call, whose "arguments" is a JSON *string*) — then codex runs the tool
// and asks again with a function_call_output item appended to "input" — or
// an assistant message, which ends the turn.
//
// codex 0.145.0 offers its shell as the unified-exec pair (read from the
// "tools" it sends):
//
//	exec_command {cmd, workdir, tty, yield_time_ms, max_output_tokens,
//	              sandbox_permissions: use_default|require_escalated,
//	              justification, prefix_rule, shell, login}
//	write_stdin  {session_id (number), chars, yield_time_ms, max_output_tokens}
//
// Older codex releases offered shell_command {command: string} or shell
// {command: [argv]}; the model picks whichever the request lists.
//
// apply_patch is offered only for models whose catalog entry says so
// (not the made-up model of CodexConfig: pass "-m gpt-5.5" to codex exec),
// as a freeform tool: the model answers with a custom_tool_call whose
// "input" is the patch text, and codex hands back a
// custom_tool_call_output, which counts as a tool output like any other.
//
// The model keeps no state per conversation: it answers a request with the
// step numbered by how many tool outputs the request carries, so one Model
// can serve several `codex exec` runs of the same script one after another
// (a retried request is answered the same way, too).
package fakemodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// Step is one answer of the scripted model: a shell command, a write to
// (or poll of) a running command's stdin, or a final message.
type Step struct {
	Exec  *ExecCall
	Stdin *StdinCall
	Say   string
	// Patch asks codex to apply a patch (apply_patch's "*** Begin Patch"
	// text) with whichever apply_patch tool it offers: the freeform
	// (custom) tool, whose input is the patch itself, or the function
	// tool, whose "input" argument is.
	Patch string

	// Before, when set, runs when the request this step answers arrives
	// and before the answer is sent, with the output codex handed back for
	// the previous step (nil for the first step). A command left running
	// (exec with a short yield) is still alive then, so this is where a
	// test looks at its process. A returned error is recorded (Errors).
	Before func(prev *ToolOutput) error
}

// ExecCall asks codex to run a command with its shell tool.
type ExecCall struct {
	Cmd     string
	Workdir string         // "" is the turn's cwd
	TTY     bool           // a PTY instead of pipes
	YieldMs int            // 0 leaves codex's default (10 s)
	Extra   map[string]any // more exec_command arguments, verbatim
}

// StdinCall asks codex to write chars to a running command's stdin (""
// only polls for output).
type StdinCall struct {
	Chars   string
	YieldMs int // 0 leaves codex's default
	// SessionID names the command; 0 is the one the previous output
	// reported still running.
	SessionID int
}

// Request is one request codex sent to the model.
type Request struct {
	Path string
	Body map[string]any // nil when the body is not JSON
	Raw  []byte
}

// ToolOutput is a function_call_output codex handed back to the model,
// with the fields of codex's unified-exec text parsed out.
type ToolOutput struct {
	CallID string
	Tool   string // the tool the model called
	Args   string // the arguments it called it with (JSON)
	Text   string // the output exactly as codex sent it

	Exited    bool // "Process exited with code N"
	ExitCode  int
	SessionID int    // "Process running with session ID N"; 0 if none
	Output    string // what follows "Output:\n" (the command's output)
}

func (o *ToolOutput) String() string {
	if o == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s(%s) -> %q", o.Tool, o.Args, o.Text)
}

var (
	exitedRE  = regexp.MustCompile(`(?m)^Process exited with code (-?\d+)`)
	runningRE = regexp.MustCompile(`(?m)^Process running with session ID (\d+)`)
)

// ParseToolOutput parses codex's unified-exec tool output text.
func ParseToolOutput(text string) ToolOutput {
	o := ToolOutput{Text: text}
	if m := exitedRE.FindStringSubmatch(text); m != nil {
		o.Exited = true
		o.ExitCode, _ = strconv.Atoi(m[1])
	}
	if m := runningRE.FindStringSubmatch(text); m != nil {
		o.SessionID, _ = strconv.Atoi(m[1])
	}
	if _, out, ok := strings.Cut(text, "\nOutput:\n"); ok {
		o.Output = out
	} else {
		o.Output = text
	}
	return o
}

// Model is the scripted model server.
type Model struct {
	srv    *httptest.Server
	script []Step

	mu       sync.Mutex
	requests []Request
	errs     []error
	calls    map[string]ToolOutput // call_id -> tool and arguments of a call we made
}

// Start serves script on a loopback port; a final message is appended when
// the script does not end with one. Close it with Close.
func Start(script []Step) *Model {
	script = append([]Step(nil), script...)
	if n := len(script); n == 0 || script[n-1].Say == "" {
		script = append(script, Step{Say: "done"})
	}
	m := &Model{script: script, calls: map[string]ToolOutput{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

// BaseURL is the provider base_url for codex's config.
func (m *Model) BaseURL() string { return m.srv.URL + "/v1" }

// Close stops the server.
func (m *Model) Close() { m.srv.Close() }

// Requests returns every request codex sent so far, in order.
func (m *Model) Requests() []Request {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Request(nil), m.requests...)
}

// Errors returns what went against the script so far: unexpected requests,
// steps codex could not be asked for, errors from Before.
func (m *Model) Errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs...)
}

// Err is Errors joined (nil when there are none).
func (m *Model) Err() error { return errors.Join(m.Errors()...) }

// ToolOutputs returns the function_call_output items of the last request
// codex sent — all the tool outputs of the latest conversation, in call
// order — or nil before the first request.
func (m *Model) ToolOutputs() []ToolOutput {
	reqs := m.Requests()
	if len(reqs) == 0 || reqs[len(reqs)-1].Body == nil {
		return nil
	}
	return m.OutputsIn(reqs[len(reqs)-1].Body)
}

func (m *Model) fail(format string, args ...any) {
	m.mu.Lock()
	m.errs = append(m.errs, fmt.Errorf(format, args...))
	m.mu.Unlock()
}

func (m *Model) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := Request{Path: r.URL.Path, Raw: raw}
	json.Unmarshal(raw, &req.Body)
	m.mu.Lock()
	m.requests = append(m.requests, req)
	m.mu.Unlock()
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		m.fail("unexpected model request %s %s", r.Method, r.URL.Path)
		http.NotFound(w, r)
		return
	}
	if req.Body == nil {
		m.fail("model request is not JSON: %.200s", raw)
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}
	if s, _ := req.Body["stream"].(bool); !s {
		m.fail("model request without stream: true")
	}

	// Which step: one per tool output codex has sent so far. Counting
	// (rather than numbering requests) answers a retried request the same.
	outs := m.OutputsIn(req.Body)
	n := len(outs)
	var prev *ToolOutput
	if n > 0 {
		prev = &outs[n-1]
	}
	if n >= len(m.script) {
		m.fail("codex asked the model %d times; the script has %d steps (last output %s)", n+1, len(m.script), prev)
		m.answer(w, n, message("script exhausted"))
		return
	}
	st := m.script[n]
	if st.Before != nil {
		if err := st.Before(prev); err != nil {
			m.fail("step %d: %v", n, err)
		}
	}
	var item map[string]any
	switch {
	case st.Exec != nil:
		name, args, err := execArgs(toolNames(req.Body), st.Exec)
		if err != nil {
			m.fail("step %d: %v", n, err)
			item = message("cannot call a shell tool: " + err.Error())
			break
		}
		item = m.call(n, name, args)
	case st.Patch != "":
		kind := toolKinds(req.Body)["apply_patch"]
		switch kind {
		case "custom":
			item = m.customCall(n, "apply_patch", st.Patch)
		case "function":
			item = m.call(n, "apply_patch", map[string]any{"input": st.Patch})
		default:
			m.fail("step %d: codex offers no apply_patch tool (tools: %v)", n, toolNames(req.Body))
			item = message("no apply_patch")
		}
	case st.Stdin != nil:
		if !toolNames(req.Body)["write_stdin"] {
			m.fail("step %d: codex offers no write_stdin tool (tools: %v)", n, toolNames(req.Body))
			item = message("no write_stdin")
			break
		}
		id := st.Stdin.SessionID
		if id == 0 && prev != nil {
			id = prev.SessionID
		}
		if id == 0 {
			m.fail("step %d: write_stdin, but the previous output reports no running session: %s", n, prev)
		}
		args := map[string]any{"session_id": id, "chars": st.Stdin.Chars}
		if st.Stdin.YieldMs > 0 {
			args["yield_time_ms"] = st.Stdin.YieldMs
		}
		item = m.call(n, "write_stdin", args)
	default:
		item = message(st.Say)
	}
	m.answer(w, n, item)
}

func message(text string) map[string]any {
	return map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": text}}}
}

// call makes a function_call item and remembers it, to label its output.
func (m *Model) call(n int, name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	id := fmt.Sprintf("call_%d", n)
	m.mu.Lock()
	m.calls[id] = ToolOutput{Tool: name, Args: string(b)}
	m.mu.Unlock()
	return map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": string(b)}
}

// customCall makes a custom_tool_call item (a freeform tool's call, its
// input plain text) and remembers it, to label its output.
func (m *Model) customCall(n int, name, input string) map[string]any {
	id := fmt.Sprintf("call_%d", n)
	m.mu.Lock()
	m.calls[id] = ToolOutput{Tool: name, Args: input}
	m.mu.Unlock()
	return map[string]any{"type": "custom_tool_call", "call_id": id, "name": name, "input": input}
}

// answer streams item as the whole response, as server-sent events.
func (m *Model) answer(w http.ResponseWriter, n int, item map[string]any) {
	respID := fmt.Sprintf("resp_%d", n)
	item["id"] = fmt.Sprintf("item_%d", n)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"] = typ
		fields["sequence_number"] = seq
		seq++
		b, _ := json.Marshal(fields)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	event("response.created", map[string]any{"response": map[string]any{"id": respID, "status": "in_progress"}})
	event("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	event("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	event("response.completed", map[string]any{"response": map[string]any{
		"id": respID, "status": "completed",
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
	}})
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// OutputsIn returns the function_call_output (and custom_tool_call_output)
// items of a request's input, in order, labelled with the call they answer.
func (m *Model) OutputsIn(body map[string]any) []ToolOutput {
	input, _ := body["input"].([]any)
	var outs []ToolOutput
	for _, it := range input {
		obj, _ := it.(map[string]any)
		if obj["type"] != "function_call_output" && obj["type"] != "custom_tool_call_output" {
			continue
		}
		o := ParseToolOutput(outputText(obj["output"]))
		o.CallID, _ = obj["call_id"].(string)
		m.mu.Lock()
		c := m.calls[o.CallID]
		m.mu.Unlock()
		o.Tool, o.Args = c.Tool, c.Args
		outs = append(outs, o)
	}
	return outs
}

// outputText flattens a function_call_output's "output": a string, or a
// list of content items with text.
func outputText(v any) string {
	switch v := v.(type) {
	case string:
		return v
	case []any:
		var b strings.Builder
		for _, it := range v {
			if obj, ok := it.(map[string]any); ok {
				if s, ok := obj["text"].(string); ok {
					b.WriteString(s)
				}
			}
		}
		return b.String()
	case map[string]any:
		if s, ok := v["content"].(string); ok {
			return s
		}
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// toolNames lists the function tools a request offers the model.
func toolNames(body map[string]any) map[string]bool {
	names := map[string]bool{}
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		if obj, ok := t.(map[string]any); ok {
			if s, ok := obj["name"].(string); ok {
				names[s] = true
			}
		}
	}
	return names
}

// toolKinds maps each tool a request offers to its type ("function",
// "custom" for a freeform tool, ...).
func toolKinds(body map[string]any) map[string]string {
	kinds := map[string]string{}
	tools, _ := body["tools"].([]any)
	for _, t := range tools {
		if obj, ok := t.(map[string]any); ok {
			name, _ := obj["name"].(string)
			typ, _ := obj["type"].(string)
			if name != "" {
				kinds[name] = typ
			}
		}
	}
	return kinds
}

// ToolKinds is toolKinds for a recorded request.
func ToolKinds(body map[string]any) map[string]string { return toolKinds(body) }

// execArgs picks the shell tool codex offers and builds its arguments.
func execArgs(tools map[string]bool, e *ExecCall) (string, map[string]any, error) {
	var name string
	args := map[string]any{}
	switch {
	case tools["exec_command"]: // unified exec (0.145)
		name = "exec_command"
		args["cmd"] = e.Cmd
		if e.TTY {
			args["tty"] = true
		}
		if e.YieldMs > 0 {
			args["yield_time_ms"] = e.YieldMs
		}
	case tools["shell_command"] && !e.TTY:
		name = "shell_command"
		args["command"] = e.Cmd
	case tools["shell"] && !e.TTY:
		name = "shell"
		args["command"] = []string{"bash", "-lc", e.Cmd}
	default:
		return "", nil, fmt.Errorf("codex offers no shell tool for this call (tty %v; tools: %v)", e.TTY, tools)
	}
	if e.Workdir != "" {
		args["workdir"] = e.Workdir
	}
	for k, v := range e.Extra {
		args[k] = v
	}
	return name, args, nil
}

// KeyEnv is the environment variable codex reads the scripted provider's
// (made-up) API key from.
const KeyEnv = "OUTPOST_FAKE_MODEL_KEY"

// CodexConfig is the config.toml of a throwaway CODEX_HOME: the model at
// baseURL as a custom Responses-API provider (its key from KeyEnv), no
// approvals, no retries, and none of the features that reach the network
// by themselves.
func CodexConfig(baseURL string) string {
	return fmt.Sprintf(`model = "outpost-scripted"
model_provider = "fake"
approval_policy = "never"

[model_providers.fake]
name = "scripted model"
base_url = %q
wire_api = "responses"
env_key = %q
request_max_retries = 0
stream_max_retries = 0

[features]
plugins = false
apps = false
remote_plugin = false
`, baseURL, KeyEnv)
}

// CodexEnv makes home a throwaway CODEX_HOME for the model at modelURL
// (writing home/config.toml) and returns the environment for `codex exec`:
// this process's, without codex's or OpenAI's own variables (so a
// developer's settings cannot leak into the run), with CODEX_HOME, the
// model's key and, unless execServerURL is "", CODEX_EXEC_SERVER_URL.
func CodexEnv(home, modelURL, execServerURL string) ([]string, error) {
	if err := os.MkdirAll(home, 0o700); err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(home, "config.toml"), []byte(CodexConfig(modelURL)), 0o600); err != nil {
		return nil, err
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "CODEX_") || strings.HasPrefix(k, "OPENAI_") {
			continue
		}
		env = append(env, kv)
	}
	env = append(env, "CODEX_HOME="+home, KeyEnv+"=not-a-real-key")
	if execServerURL != "" {
		env = append(env, "CODEX_EXEC_SERVER_URL="+execServerURL)
	}
	return env, nil
}

// CodexExecArgs is the argv (after the codex binary) of one scripted
// `codex exec` turn in workspace: the config checked strictly, no git
// repository needed, nothing persisted, no colour, then extra (say "-s",
// "read-only") and the prompt.
func CodexExecArgs(workspace string, extra ...string) []string {
	argv := append([]string{"exec", "--strict-config", "--skip-git-repo-check", "--ephemeral", "--color", "never", "-C", workspace}, extra...)
	return append(argv, "Follow the script.")
}
