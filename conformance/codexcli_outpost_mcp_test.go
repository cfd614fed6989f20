//go:build linux

package conformance

// The real codex CLI (peers.CodexVersion) using `outpost mcp` as an MCP
// server: codex's config.toml names it under [mcp_servers.outpost] as a
// stdio server (the outpost binary with "mcp --relay URL --executor ID
// --token T --workspace DIR", XDG_CONFIG_HOME and XDG_STATE_HOME in its
// env for a client key and pins of its own) and codex starts it itself. A
// scripted model calls its run tool once, then ends the turn. codex 0.171
// offers the tools to the model as the namespace tool "mcp__outpost" (the
// call names "run" in that namespace), and refuses an MCP call under
// approval_policy = "never" unless the server's tools are approved
// (default_tools_approval_mode = "approve").
//
// The command must run on the executor — `outpost executor join`, behind
// `outpost relay serve` — and not in codex's process tree (where `outpost
// mcp` itself runs). It is checked three ways: where the test runs as root,
// the executor runs as a uid of its own, and the command prints its uid and
// uid_map (in a sandbox it is root of a user namespace) and the test reads
// the uid of its processes in /proc; while the command waits for the test,
// the test walks /proc from it up and finds the executor, not codex; and
// the command reads a file from, and writes one to, outpost mcp's
// --workspace (which the executor does not run in), while codex's own
// workspace stays empty.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/fakemodel"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// mcpExecutorUID is the user the executor runs as when the test is root:
// not nobody's 65534, which a sandbox started by root drops to by default
// (sandbox.DefaultUser), so that a command run on this side in a sandbox
// is not taken for one of the executor's.
const mcpExecutorUID = 46122

func TestCodexCLIOutpostMCP(t *testing.T) {
	cli, err := peers.CodexBinaryAt(peers.CodexVersion)
	if err != nil {
		testdeps.Missing(t, "codex", "skipping the codex CLI test of outpost mcp: %v", err)
	}
	bin := os.Getenv(outpostBinEnv)
	if bin == "" {
		bin = outpostBinary(t)
	}
	asOther := os.Geteuid() == 0
	uid := os.Getuid()
	if asOther {
		uid = mcpExecutorUID
	}

	// Everything the executor side uses, where its user can reach it (not
	// below the test's 0700 temporary directories): the binary, its
	// state and config, and the workspace outpost mcp names.
	root, err := os.MkdirTemp("/var/tmp", "outpost-codex-mcp-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	exeBin := filepath.Join(root, "outpost")
	if err := copyExecutable(bin, exeBin); err != nil {
		t.Fatal(err)
	}
	exeDir := filepath.Join(root, "executor")
	exeWS := filepath.Join(exeDir, "workspace")
	for _, d := range []string{exeDir, exeWS, filepath.Join(exeDir, "home"), filepath.Join(exeDir, "state")} {
		if err := os.Mkdir(d, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	tag := randomTag()
	secret := "only-on-the-executor-" + tag
	onlyThere := filepath.Join(exeWS, "executor-only.txt")
	if err := os.WriteFile(onlyThere, []byte(secret+"\n"), 0o400); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(onlyThere, uid, uid); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// The relay and the client (outpost mcp) side: their own config and
	// state, so neither reads the user's outpost files.
	clientDir := t.TempDir()
	clientEnv := []string{"XDG_CONFIG_HOME=" + filepath.Join(clientDir, "config"), "XDG_STATE_HOME=" + filepath.Join(clientDir, "state")}
	relayState := filepath.Join(clientDir, "relay")
	relay, err := peers.Start(ctx, clientEnv, bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", relayState, "--log-level", "warn")
	if err != nil {
		t.Fatalf("relay: %v", err)
	}
	t.Cleanup(relay.Stop)
	const id = "mcp-exec"
	joinTok, err := peers.TokenEnv(ctx, bin, relayState, clientEnv, "--join", "--uses", "1")
	if err != nil {
		t.Fatal(err)
	}
	clientTok, err := peers.TokenEnv(ctx, bin, relayState, clientEnv, "--client", "--executors", id)
	if err != nil {
		t.Fatal(err)
	}
	executor := startExecutorAs(ctx, t, asOther, exeBin, exeDir, []string{
		"executor", "join", "--relay", relay.URL, "--token", joinTok, "--id", id,
		"--state-dir", filepath.Join(exeDir, "state"), "--log-level", "info"})

	// codex's side: a throwaway CODEX_HOME naming the scripted model and
	// outpost mcp, and a workspace of its own that nothing may touch.
	marker := "mcp-" + tag // in the command line of the command's shell
	gate := filepath.Join(exeWS, "gate-"+tag)
	probe := "probe-" + tag + ".txt"
	command := fmt.Sprintf(`echo "uid=$(id -u)"; cat /proc/self/uid_map; echo "pwd=$(pwd)"; cat executor-only.txt; echo wrote > %s; `+
		`until [ -e gate-%s ]; do sleep 0.05; done; echo "done-%s" # %s`, probe, tag, tag, marker)
	model := startMCPScriptModel(t, command)
	home := t.TempDir()
	env, err := fakemodel.CodexEnv(home, model.baseURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	mcpArgs := []string{"mcp", "--relay", relay.URL, "--executor", id, "--token", clientTok, "--workspace", exeWS}
	if err := appendMCPServer(filepath.Join(home, "config.toml"), bin, mcpArgs, clientEnv); err != nil {
		t.Fatal(err)
	}
	codexWS := t.TempDir()

	runCtx, runCancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer runCancel()
	cmd := exec.CommandContext(runCtx, cli, fakemodel.CodexExecArgs(codexWS, "--json")...)
	cmd.Dir = codexWS
	cmd.Env = env
	procgroup.KillOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}

	// While the command waits for the gate: where does it run?
	var (
		procs    []markedProc
		treeErr  error
		procUIDs []int
	)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		defer os.WriteFile(gate, nil, 0o644)
		deadline := time.Now().Add(20 * time.Second)
		for time.Now().Before(deadline) && runCtx.Err() == nil {
			if pids := markedPids(marker); len(pids) > 0 {
				procs, treeErr = underServer(executor.Process.Pid, marker)
				for _, p := range pids {
					procUIDs = append(procUIDs, processUID(p))
				}
				for _, p := range procs {
					if containsPid(p.chain, cmd.Process.Pid) {
						treeErr = fmt.Errorf("the command runs in codex's process tree (codex is %d): %s", cmd.Process.Pid, p)
					}
				}
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		treeErr = fmt.Errorf("no process carrying %q appeared", marker)
	}()
	runErr := cmd.Wait()
	runCancel()
	<-watched

	reqs := model.requests()
	report := func() string {
		var b strings.Builder
		fmt.Fprintf(&b, "codex %s exec: %v\nstdout:\n%s\nstderr:\n%s\nmodel saw %d requests\n", peers.CodexVersion, runErr, stdout.String(), stderr.String(), len(reqs))
		for i, r := range reqs {
			fmt.Fprintf(&b, "  request %d: tools %v; outputs %q\n", i, r.tools, r.outputs)
		}
		fmt.Fprintf(&b, "executor stderr:\n%s\nrelay stderr:\n%s", executor.stderr.String(), relay.Stderr())
		return b.String()
	}
	t.Logf("%s", report())
	if runErr != nil {
		t.Fatalf("codex exec failed: %v", runErr)
	}
	if errs := model.errors(); len(errs) > 0 {
		t.Fatalf("scripted model: %v", errs)
	}
	if len(reqs) != 2 {
		t.Fatalf("codex asked the model %d times, want 2 (the call, then its output)", len(reqs))
	}
	t.Logf("codex offered the model outpost's tools as %s", model.calledAs())

	// codex says the MCP call succeeded.
	ev, err := mcpCallEvent(stdout.String())
	if err != nil {
		t.Errorf("codex's JSON events: %v", err)
	} else {
		t.Logf("codex's mcp_tool_call event: %s", ev.raw)
		if ev.Status != "completed" || len(ev.Error) > 0 && string(ev.Error) != "null" {
			t.Errorf("codex reports the MCP tool call %s, error %s", ev.Status, ev.Error)
		}
		if ev.Server != "outpost" || ev.Tool != "run" {
			t.Errorf("codex reports a call of %s/%s, want outpost/run", ev.Server, ev.Tool)
		}
	}

	// The output codex handed back to the model carries the command's.
	outs := reqs[1].outputs
	if len(outs) != 1 {
		t.Fatalf("codex handed back %d tool outputs, want 1", len(outs))
	}
	out, code, structured := runToolOutput(outs[0])
	t.Logf("the command's output as codex handed it back (structured %v, exit code %d):\n%s", structured, code, out)
	if structured && code != 0 {
		t.Errorf("the run tool reports exit code %d, want 0", code)
	}
	// Its working directory (outpost mcp's --workspace) and a file only
	// there.
	for _, want := range []string{"\npwd=" + exeWS + "\n", "\n" + secret + "\n", "\ndone-" + tag + "\n"} {
		if !strings.Contains("\n"+out, want) {
			t.Errorf("the tool output codex handed back lacks %q:\n%s", strings.TrimPrefix(want, "\n"), outs[0])
		}
	}
	// Its uid, which in a sandbox's user namespace is another (root,
	// mapped to the user outside): translated, it must be the executor's.
	if hostUID, err := outerUID(out); err != nil {
		t.Errorf("the command's uid: %v", err)
	} else if hostUID != uid {
		t.Errorf("the command printed that it runs as uid %d (through its uid_map), want the executor's %d", hostUID, uid)
	}

	// It ran on the executor.
	if treeErr != nil {
		t.Errorf("where the command ran: %v", treeErr)
	}
	for _, p := range procs {
		t.Logf("process tree: %s", p)
	}
	for _, u := range procUIDs {
		if u != uid {
			t.Errorf("the command's processes ran as uids %v, want the executor's %d", procUIDs, uid)
			break
		}
	}
	if !asOther {
		t.Logf("not root: the executor runs as the test's own user; only the process tree tells it from codex")
	}
	// (Its owner says little: the workspace-write sandbox maps its
	// root to the workspace's owner.)
	if _, err := os.Stat(filepath.Join(exeWS, probe)); err != nil {
		t.Errorf("the command's file is not in the executor's workspace: %v", err)
	}
	if ents, err := os.ReadDir(codexWS); err != nil || len(ents) > 0 {
		t.Errorf("codex's own workspace was touched: %v %v", ents, err)
	}
}

// startExecutorAs starts the outpost executor (bin with args, in dir,
// HOME and XDG directories below it), as mcpExecutorUID when other, and
// waits until it has joined the relay.
func startExecutorAs(ctx context.Context, t *testing.T, other bool, bin, dir string, args []string) *loggedCmd {
	t.Helper()
	cmd := exec.Command(bin, args...)
	// Not in the workspace, so a relative path only lands there if
	// outpost mcp's --workspace is honoured.
	cmd.Dir = filepath.Join(dir, "home")
	cmd.Env = append(os.Environ(), "HOME="+filepath.Join(dir, "home"),
		"XDG_CONFIG_HOME="+filepath.Join(dir, "home", ".config"), "XDG_STATE_HOME="+filepath.Join(dir, "home", ".state"))
	procgroup.Own(cmd)
	if other {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: mcpExecutorUID, Gid: mcpExecutorUID, Groups: []uint32{}}
	}
	lc := &loggedCmd{Cmd: cmd, stderr: peers.NewTailBuffer(64 << 10)}
	cmd.Stderr = lc.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			procgroup.Kill(cmd.Process.Pid)
			<-done
		}
	})
	for !strings.Contains(lc.stderr.String(), "joined the relay") {
		select {
		case <-ctx.Done():
			t.Fatalf("the executor did not join the relay: %v; stderr: %s", ctx.Err(), lc.stderr.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	return lc
}

type loggedCmd struct {
	*exec.Cmd
	stderr *peers.TailBuffer
}

// copyExecutable copies the binary src to dst, mode 0755.
func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// appendMCPServer adds outpost mcp (bin with args, env) to a codex
// config.toml as the stdio MCP server "outpost", its tools approved (codex
// refuses an unapproved MCP call under approval_policy = "never").
func appendMCPServer(config, bin string, args, env []string) error {
	var b strings.Builder
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = strconv.Quote(a)
	}
	fmt.Fprintf(&b, "\n[mcp_servers.outpost]\ncommand = %q\nargs = [%s]\nstartup_timeout_sec = 20\ntool_timeout_sec = 30\ndefault_tools_approval_mode = \"approve\"\n",
		bin, strings.Join(quoted, ", "))
	b.WriteString("\n[mcp_servers.outpost.env]\n")
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		fmt.Fprintf(&b, "%s = %q\n", k, v)
	}
	f, err := os.OpenFile(config, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// markedPids are the processes (other than this one) whose command line
// contains marker.
func markedPids(marker string) []int {
	ents, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == os.Getpid() {
			continue
		}
		if b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline")); err == nil && strings.Contains(string(b), marker) {
			pids = append(pids, p)
		}
	}
	return pids
}

// processUID is the real uid of process p, or -1.
func processUID(p int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "Uid:"); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, err := strconv.Atoi(f[0])
				if err == nil {
					return n
				}
			}
		}
	}
	return -1
}

var (
	printedUIDRE = regexp.MustCompile(`(?m)^uid=(\d+)$`)
	uidMapRE     = regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+(\d+)\s*$`)
)

// outerUID is the uid a command printed ("uid=N", then its
// /proc/self/uid_map) as its user namespace's parent sees it.
func outerUID(out string) (int, error) {
	m := printedUIDRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("no uid= line in %q", out)
	}
	in, _ := strconv.Atoi(m[1])
	for _, l := range uidMapRE.FindAllStringSubmatch(out, -1) {
		first, _ := strconv.Atoi(l[1])
		outer, _ := strconv.Atoi(l[2])
		n, _ := strconv.Atoi(l[3])
		if in >= first && in-first < n {
			return outer + in - first, nil
		}
	}
	return 0, fmt.Errorf("uid %d is in no uid_map line of %q", in, out)
}

// mcpCall is codex's --json event for a finished MCP tool call.
type mcpCall struct {
	Server, Tool, Status string
	Error                json.RawMessage
	raw                  string
}

// mcpCallEvent finds the one item.completed event of type mcp_tool_call in
// codex's JSON lines.
func mcpCallEvent(jsonl string) (mcpCall, error) {
	var found []mcpCall
	sc := bufio.NewScanner(strings.NewReader(jsonl))
	sc.Buffer(nil, 4<<20)
	for sc.Scan() {
		var ev struct {
			Type string `json:"type"`
			Item struct {
				Type   string          `json:"type"`
				Server string          `json:"server"`
				Tool   string          `json:"tool"`
				Status string          `json:"status"`
				Error  json.RawMessage `json:"error"`
			} `json:"item"`
		}
		if json.Unmarshal(sc.Bytes(), &ev) != nil || ev.Type != "item.completed" || ev.Item.Type != "mcp_tool_call" {
			continue
		}
		found = append(found, mcpCall{Server: ev.Item.Server, Tool: ev.Item.Tool, Status: ev.Item.Status, Error: ev.Item.Error, raw: sc.Text()})
	}
	if len(found) != 1 {
		return mcpCall{}, fmt.Errorf("%d completed mcp_tool_call events, want 1", len(found))
	}
	return found[0], nil
}

// mcpScriptModel is a scripted Responses-API model (as fakemodel, whose
// steps are codex's own tools) that calls outpost's MCP run tool with a
// shell command, then ends the turn. codex 0.171 offers an MCP server's
// tools as a "namespace" tool mcp__SERVER holding them by their own names
// (and takes a call with that namespace); older releases offered each as a
// function mcp__SERVER__TOOL.
type mcpScriptModel struct {
	srv     *httptest.Server
	command string

	mu   sync.Mutex
	reqs []mcpModelRequest
	errs []error
	as   string // how the call named the tool
}

type mcpModelRequest struct {
	tools   []string // "name", or "namespace/name" for a namespace's tools
	outputs []string // the function_call_output texts
}

func startMCPScriptModel(t *testing.T, command string) *mcpScriptModel {
	m := &mcpScriptModel{command: command}
	m.srv = httptest.NewServer(http.HandlerFunc(m.serve))
	t.Cleanup(m.srv.Close)
	return m
}

func (m *mcpScriptModel) baseURL() string { return m.srv.URL + "/v1" }

func (m *mcpScriptModel) requests() []mcpModelRequest {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]mcpModelRequest(nil), m.reqs...)
}

func (m *mcpScriptModel) errors() []error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]error(nil), m.errs...)
}

func (m *mcpScriptModel) calledAs() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.as
}

func (m *mcpScriptModel) fail(err error) {
	m.mu.Lock()
	m.errs = append(m.errs, err)
	m.mu.Unlock()
}

func (m *mcpScriptModel) serve(w http.ResponseWriter, r *http.Request) {
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	if r.Method != http.MethodPost || r.URL.Path != "/v1/responses" {
		m.fail(fmt.Errorf("unexpected model request %s %s", r.Method, r.URL.Path))
		http.NotFound(w, r)
		return
	}
	var body struct {
		Tools []struct {
			Type  string `json:"type"`
			Name  string `json:"name"`
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		} `json:"tools"`
		Input []struct {
			Type   string          `json:"type"`
			Output json.RawMessage `json:"output"`
		} `json:"input"`
	}
	if err := json.Unmarshal(raw, &body); err != nil {
		m.fail(fmt.Errorf("model request is not JSON: %v", err))
		http.Error(w, "bad JSON", http.StatusBadRequest)
		return
	}
	var req mcpModelRequest
	var item map[string]any
	for _, tl := range body.Tools {
		switch {
		case tl.Type == "namespace":
			for _, sub := range tl.Tools {
				req.tools = append(req.tools, tl.Name+"/"+sub.Name)
				if tl.Name == "mcp__outpost" && sub.Name == "run" {
					item = map[string]any{"name": "run", "namespace": tl.Name}
				}
			}
		default:
			req.tools = append(req.tools, tl.Name)
			if tl.Name == "mcp__outpost__run" && item == nil {
				item = map[string]any{"name": tl.Name}
			}
		}
	}
	for _, in := range body.Input {
		if in.Type == "function_call_output" {
			req.outputs = append(req.outputs, flattenOutput(in.Output))
		}
	}
	m.mu.Lock()
	n := len(m.reqs)
	m.reqs = append(m.reqs, req)
	m.mu.Unlock()

	switch {
	case len(req.outputs) > 0:
		item = map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "done"}}}
	case item == nil:
		m.fail(fmt.Errorf("codex offers no outpost run tool (tools: %v)", req.tools))
		item = map[string]any{"type": "message", "role": "assistant", "content": []any{map[string]any{"type": "output_text", "text": "no outpost tool"}}}
	default:
		args, _ := json.Marshal(map[string]any{"shell": m.command, "timeout_ms": 20000})
		item["type"], item["call_id"], item["arguments"] = "function_call", "call_0", string(args)
		m.mu.Lock()
		m.as = fmt.Sprintf("%v", item)
		m.mu.Unlock()
	}
	item["id"] = fmt.Sprintf("item_%d", n)
	respID := fmt.Sprintf("resp_%d", n)
	w.Header().Set("Content-Type", "text/event-stream")
	seq := 0
	event := func(typ string, fields map[string]any) {
		fields["type"], fields["sequence_number"] = typ, seq
		seq++
		b, _ := json.Marshal(fields)
		fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ, b)
	}
	event("response.created", map[string]any{"response": map[string]any{"id": respID, "status": "in_progress"}})
	event("response.output_item.added", map[string]any{"output_index": 0, "item": item})
	event("response.output_item.done", map[string]any{"output_index": 0, "item": item})
	event("response.completed", map[string]any{"response": map[string]any{"id": respID, "status": "completed",
		"usage": map[string]any{"input_tokens": 1, "output_tokens": 1, "total_tokens": 2}}})
}

// runToolOutput is the command's output in a run tool output codex
// handed back: codex gives the model the tool's structured content (as
// JSON, after "Output:") when there is some, its text content otherwise.
// It reports the structured exit code, and whether there was one.
func runToolOutput(text string) (out string, exitCode int, structured bool) {
	body := text
	if _, after, ok := strings.Cut(text, "Output:\n"); ok {
		body = after
	}
	var res struct {
		ExitCode *int `json:"exit_code"`
		Stdout   struct {
			Text string `json:"text"`
		} `json:"stdout"`
		Stderr struct {
			Text string `json:"text"`
		} `json:"stderr"`
	}
	if json.Unmarshal([]byte(strings.TrimSpace(body)), &res) != nil || res.ExitCode == nil {
		return body, -1, false
	}
	return res.Stdout.Text + res.Stderr.Text, *res.ExitCode, true
}

// flattenOutput is a function_call_output's text: a string, or the texts
// of a list of content items.
func flattenOutput(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var items []struct {
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &items) == nil {
		var b strings.Builder
		for _, it := range items {
			b.WriteString(it.Text)
			b.WriteString("\n")
		}
		return b.String()
	}
	return string(raw)
}
