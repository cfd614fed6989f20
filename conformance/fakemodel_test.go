package conformance

// A scripted model for end-to-end runs of the real `codex exec`: a small
// HTTP server speaking the OpenAI Responses API as codex 0.145.0 uses it.
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

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strconv"
	"strings"
	"sync"
)

// step is one answer of the scripted model: a shell command, a write to
// (or poll of) a running command's stdin, or a final message.
type step struct {
	Exec  *execCall
	Stdin *stdinCall
	Say   string

	// Before, when set, runs when the request this step answers arrives
	// and before the answer is sent, with the output codex handed back for
	// the previous step (nil for the first step). A command left running
	// (exec with a short yield) is still alive then, so this is where a
	// test looks at its process. A returned error fails the run.
	Before func(prev *toolOutput) error
}

// execCall asks codex to run a command with its shell tool.
type execCall struct {
	Cmd     string
	Workdir string         // "" is the turn's cwd
	TTY     bool           // a PTY instead of pipes
	YieldMs int            // 0 leaves codex's default (10 s)
	Extra   map[string]any // more exec_command arguments, verbatim
}

// stdinCall asks codex to write chars to a running command's stdin ("" only
// polls for output).
type stdinCall struct {
	Chars   string
	YieldMs int // 0 leaves codex's default
	// SessionID names the command; 0 is the one the previous output
	// reported still running.
	SessionID int
}

// modelRequest is one request codex sent to the model.
type modelRequest struct {
	Path string
	Body map[string]any
	Raw  []byte
}

// toolOutput is a function_call_output codex handed back to the model,
// with the fields of codex's unified-exec text parsed out.
type toolOutput struct {
	CallID string
	Tool   string // the tool the model called
	Args   string // the arguments it called it with (JSON)
	Text   string // the output exactly as codex sent it

	Exited    bool // "Process exited with code N"
	ExitCode  int
	SessionID int    // "Process running with session ID N"; 0 if none
	Output    string // what follows "Output:\n" (the command's output)
}

func (o *toolOutput) String() string {
	if o == nil {
		return "<none>"
	}
	return fmt.Sprintf("%s(%s) -> %q", o.Tool, o.Args, o.Text)
}

var (
	exitedRE  = regexp.MustCompile(`(?m)^Process exited with code (-?\d+)`)
	runningRE = regexp.MustCompile(`(?m)^Process running with session ID (\d+)`)
)

func parseToolOutput(text string) toolOutput {
	o := toolOutput{Text: text}
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

// fakeModel is the scripted model server.
type fakeModel struct {
	srv    *httptest.Server
	script []step

	mu       sync.Mutex
	requests []modelRequest
	errs     []error
	calls    map[string]toolOutput // call_id -> tool and arguments of a call we made
}

// startFakeModel serves script; a final message is appended when the script
// does not end with one. Close it with close().
func startFakeModel(script []step) *fakeModel {
	if n := len(script); n == 0 || script[n-1].Say == "" {
		script = append(script, step{Say: "done"})
	}
	m := &fakeModel{script: script, calls: map[string]toolOutput{}}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	return m
}

// baseURL is the provider base_url for codex's config.
func (m *fakeModel) baseURL() string { return m.srv.URL + "/v1" }

func (m *fakeModel) close() { m.srv.Close() }

func (m *fakeModel) fail(format string, args ...any) {
	m.mu.Lock()
	m.errs = append(m.errs, fmt.Errorf(format, args...))
	m.mu.Unlock()
}

func (m *fakeModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(r.Body)
	req := modelRequest{Path: r.URL.Path, Raw: raw}
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
	outs := m.outputsIn(req.Body)
	n := len(outs)
	var prev *toolOutput
	if n > 0 {
		prev = &outs[n-1]
	}
	if n >= len(m.script) {
		m.fail("codex asked the model %d times; the script has %d steps (last output %s)", n+1, len(m.script), prev)
		m.answer(w, n, map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "script exhausted"}}})
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
func (m *fakeModel) call(n int, name string, args map[string]any) map[string]any {
	b, _ := json.Marshal(args)
	id := fmt.Sprintf("call_%d", n)
	m.mu.Lock()
	m.calls[id] = toolOutput{Tool: name, Args: string(b)}
	m.mu.Unlock()
	return map[string]any{"type": "function_call", "call_id": id, "name": name, "arguments": string(b)}
}

// answer streams item as the whole response, as server-sent events.
func (m *fakeModel) answer(w http.ResponseWriter, n int, item map[string]any) {
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

// outputsIn returns the function_call_output items of a request's input,
// in order, labelled with the call they answer.
func (m *fakeModel) outputsIn(body map[string]any) []toolOutput {
	input, _ := body["input"].([]any)
	var outs []toolOutput
	for _, it := range input {
		obj, _ := it.(map[string]any)
		if obj["type"] != "function_call_output" {
			continue
		}
		o := parseToolOutput(outputText(obj["output"]))
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

// execArgs picks the shell tool codex offers and builds its arguments.
func execArgs(tools map[string]bool, e *execCall) (string, map[string]any, error) {
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

// snapshot returns what the model saw so far.
func (m *fakeModel) snapshot() ([]modelRequest, []error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]modelRequest(nil), m.requests...), append([]error(nil), m.errs...)
}
