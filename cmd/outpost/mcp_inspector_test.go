//go:build linux

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/sandbox"
)

// The outpost mcp tests drive a real `outpost mcp` — through a real relay
// to a real joined executor — with the official MCP Inspector CLI (npm
// @modelcontextprotocol/inspector-cli, which scripts/install-mcp-inspector.sh
// puts in .bench/mcp-inspector), over stdio (the inspector spawns outpost
// mcp from an mcpServers config file, as MCP clients do) and over
// Streamable HTTP (outpost mcp --listen http://127.0.0.1:0/mcp).
//
// The inspector CLI makes one request per MCP session (two node processes
// and, over stdio, an outpost mcp each: about a second of CPU), and a
// session's start handles end with it. So the inspector covers tools/list,
// run, write_file, read_file, edit_file, the errors and the HTTP bearer
// token; everything else — start, read, write_stdin, signal, progress,
// cancellation, the rest of run and of the file tools — goes through a
// small Node program (mcpDriverJS) that holds one session open with the
// same official TypeScript SDK client and transports the inspector runs on
// (its node_modules/@modelcontextprotocol/sdk). Both validate every
// result's structuredContent against the tool's outputSchema from
// tools/list, as the SDK's Client does.

// mcpInspectorVersion is the release scripts/install-mcp-inspector.sh pins.
const mcpInspectorVersion = "1.0.3"

// mcpTools are the tools outpost mcp serves.
var mcpTools = []string{"run", "start", "read", "write_stdin", "signal", "terminate", "list",
	"read_file", "write_file", "edit_file", "list_directory", "search", "executors"}

// handleTools are the tools whose handle decides the executor, and those
// about every executor, which take no "executor".
var handleTools = map[string]bool{"read": true, "write_stdin": true, "signal": true, "terminate": true, "list": true, "executors": true}

// mcpInspector returns the inspector's cli.js and the directory of the
// SDK's ESM build it runs on.
func mcpInspector(t *testing.T) (cli, sdk string) {
	t.Helper()
	if _, err := exec.LookPath("node"); err != nil {
		testdeps.Missing(t, "mcp-inspector", "node is not on $PATH")
	}
	modules, err := filepath.Abs("../../.bench/mcp-inspector/node_modules")
	if err != nil {
		t.Fatal(err)
	}
	pkg := filepath.Join(modules, "@modelcontextprotocol", "inspector-cli")
	raw, err := os.ReadFile(filepath.Join(pkg, "package.json"))
	if err != nil {
		testdeps.Missing(t, "mcp-inspector", "the MCP Inspector CLI is not installed (run scripts/install-mcp-inspector.sh): %v", err)
	}
	var meta struct{ Version string }
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Version != mcpInspectorVersion {
		testdeps.Missing(t, "mcp-inspector", "the MCP Inspector CLI in %s is %q, not %s (run scripts/install-mcp-inspector.sh)", pkg, meta.Version, mcpInspectorVersion)
	}
	for _, dir := range []string{filepath.Join(pkg, "node_modules"), modules} {
		sdk = filepath.Join(dir, "@modelcontextprotocol", "sdk", "dist", "esm")
		if _, err := os.Stat(filepath.Join(sdk, "client", "index.js")); err == nil {
			return filepath.Join(pkg, "build", "cli.js"), sdk
		}
	}
	testdeps.Missing(t, "mcp-inspector", "the MCP Inspector CLI's @modelcontextprotocol/sdk is not under %s (run scripts/install-mcp-inspector.sh)", modules)
	return "", ""
}

// mcpStack is a relay, one joined executor (e-1), a client token for it
// and the inspector.
type mcpStack struct {
	rs       *relayStack
	token    string
	cli, sdk string
	driver   string // mcpDriverJS's file
}

func startMCPStack(t *testing.T) *mcpStack {
	t.Helper()
	cli, sdk := mcpInspector(t)
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
		testdeps.Missing(t, "sandbox", "no sandbox here (outpost mcp runs workspace-write by default): %v", err)
	}
	s := &mcpStack{rs: startRelayStack(t), cli: cli, sdk: sdk, driver: filepath.Join(t.TempDir(), "driver.mjs")}
	if err := os.WriteFile(s.driver, []byte(mcpDriverJS), 0o644); err != nil {
		t.Fatal(err)
	}
	s.token = s.rs.token("--client", "--executors", "e-*")
	s.rs.join("e-1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		cmd := exec.Command(outpostBin, "exec", "--relay", s.rs.URL, "--executor", "e-1", "--token", s.token, "--", "true")
		cmd.Env = s.rs.Env
		out, err := cmd.CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("e-1 never became reachable: %v %s", err, out)
		}
		time.Sleep(50 * time.Millisecond) // still joining
	}
	return s
}

// mcpWorkspace is a new directory for --workspace, by its real path.
func mcpWorkspace(t *testing.T) string {
	t.Helper()
	ws, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

// mcpEndpoint is one outpost mcp as the inspector and the driver reach it.
type mcpEndpoint struct {
	transport string
	target    []string       // the inspector's arguments naming the server
	driver    map[string]any // the driver's transport: {command,args} or {url}
	log       *syncBuffer    // the HTTP server's stderr; nil for stdio
}

func (s *mcpStack) serverArgs(ws string, extra ...string) []string {
	return append([]string{"mcp", "--relay", s.rs.URL, "--executor", "e-1", "--token", s.token, "--workspace", ws}, extra...)
}

// endpoint serves outpost mcp over transport ("stdio" or "http") with
// workspace ws and extra flags.
func (s *mcpStack) endpoint(t *testing.T, transport, ws string, extra ...string) *mcpEndpoint {
	t.Helper()
	if transport == "stdio" {
		args := s.serverArgs(ws, extra...)
		conf := map[string]any{"mcpServers": map[string]any{"outpost": map[string]any{
			"type": "stdio", "command": outpostBin, "args": args,
			"env": map[string]string{"XDG_CONFIG_HOME": filepath.Join(s.rs.dir, "cfg")},
		}}}
		raw, _ := json.Marshal(conf)
		path := filepath.Join(t.TempDir(), "mcp.json")
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			t.Fatal(err)
		}
		return &mcpEndpoint{transport: transport, target: []string{"--config", path, "--server", "outpost"},
			driver: map[string]any{"command": outpostBin, "args": args}}
	}
	cmd := exec.Command(outpostBin, append(s.serverArgs(ws, extra...), "--listen", "http://127.0.0.1:0/mcp")...)
	cmd.Env = s.rs.Env
	log := new(syncBuffer)
	cmd.Stderr = log
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
			t.Errorf("outpost mcp --listen http did not exit within 10s of SIGTERM:\n%s", log.String())
		}
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- l
		io.Copy(io.Discard, stdout)
	}()
	var url string
	select {
	case l := <-line:
		url = strings.TrimSpace(l)
	case <-time.After(20 * time.Second):
		t.Fatalf("outpost mcp --listen http printed no URL within 20s:\n%s", log.String())
	}
	if !strings.HasPrefix(url, "http://127.0.0.1:") || !strings.HasSuffix(url, "/mcp") || strings.HasSuffix(url, ":0/mcp") {
		t.Fatalf("outpost mcp --listen http printed %q first:\n%s", url, log.String())
	}
	return &mcpEndpoint{transport: transport, target: []string{url, "--transport", "http"},
		driver: map[string]any{"url": url}, log: log}
}

func (ep *mcpEndpoint) serverLog() string {
	if ep.log == nil {
		return "(stdio: the inspector keeps the server's stderr)"
	}
	return ep.log.String()
}

// inspect runs the inspector CLI against ep with args (--method ...) and
// returns its stdout, stderr and exit status.
func (s *mcpStack) inspect(t *testing.T, ep *mcpEndpoint, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	argv := append(append([]string{s.cli, "--cli"}, ep.target...), args...)
	cmd := exec.CommandContext(ctx, "node", argv...)
	cmd.Env = s.rs.Env
	// The inspector finds its own package.json as ../package.json of the
	// working directory (index.js's callMethod), so it runs in build/.
	cmd.Dir = filepath.Dir(s.cli)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case ctx.Err() != nil:
		t.Fatalf("inspector %q did not finish within 30s; stdout %s\nstderr %s\nserver log:\n%s", args, out.String(), errb.String(), ep.serverLog())
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

// toolResult is a CallToolResult.
type toolResult struct {
	Content []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	} `json:"content"`
	Structured json.RawMessage `json:"structuredContent"`
	IsError    bool            `json:"isError"`
}

// text is the text of the result's text content.
func (r *toolResult) text() string {
	var b strings.Builder
	for _, c := range r.Content {
		if c.Type == "text" {
			b.WriteString(c.Text)
		}
	}
	return b.String()
}

// decode unmarshals the structured content of a successful result into v.
func (r *toolResult) decode(t *testing.T, what string, v any) {
	t.Helper()
	if r.IsError {
		t.Fatalf("%s: tool error %q", what, r.text())
	}
	if len(r.Structured) == 0 || string(r.Structured) == "null" {
		t.Fatalf("%s: no structuredContent; content %q", what, r.text())
	}
	if err := json.Unmarshal(r.Structured, v); err != nil {
		t.Fatalf("%s: structuredContent %s: %v", what, r.Structured, err)
	}
}

// inspectorToolArgs are args as the inspector's --tool-arg key=value
// pairs: each value JSON, which the inspector parses back (a string that
// is JSON text would otherwise become a number, a bool or an object).
func inspectorToolArgs(args map[string]any) []string {
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var out []string
	for _, k := range keys {
		raw, err := json.Marshal(args[k])
		if err != nil {
			panic(err)
		}
		out = append(out, k+"="+string(raw))
	}
	return out
}

// mcpCaller calls tools in MCP sessions: the inspector (a session per
// call) or the driver (one session).
type mcpCaller interface {
	// callTool returns the result, or nil and why the call failed (a
	// JSON-RPC error, a result the SDK refused).
	callTool(t *testing.T, tool string, args map[string]any) (*toolResult, string)
	serverLog() string
}

// inspectorCaller calls each tool with the inspector CLI.
type inspectorCaller struct {
	s  *mcpStack
	ep *mcpEndpoint
}

func (c inspectorCaller) serverLog() string { return c.ep.serverLog() }

func (c inspectorCaller) callTool(t *testing.T, tool string, args map[string]any) (*toolResult, string) {
	t.Helper()
	argv := []string{"--method", "tools/call", "--tool-name", tool}
	if len(args) > 0 {
		argv = append(append(argv, "--tool-arg"), inspectorToolArgs(args)...)
	}
	stdout, stderr, code := c.s.inspect(t, c.ep, argv...)
	if code != 0 {
		return nil, fmt.Sprintf("inspector exit %d: %s", code, inspectorMessage(stderr))
	}
	var r toolResult
	if err := json.Unmarshal([]byte(stdout), &r); err != nil {
		t.Fatalf("tools/call %s: inspector printed %q: %v", tool, stdout, err)
	}
	return &r, ""
}

// mustCall calls a tool that must succeed (no tool error either) and
// decodes its structured result into v.
func mustCall(t *testing.T, c mcpCaller, tool string, args map[string]any, v any) *toolResult {
	t.Helper()
	r, failed := c.callTool(t, tool, args)
	if r == nil {
		t.Fatalf("tools/call %s %v: %s\nserver log:\n%s", tool, args, failed, c.serverLog())
	}
	r.decode(t, "tools/call "+tool, v)
	return r
}

// refused calls a tool that must fail and says how it did: a JSON-RPC
// error (the inspector exits non-zero) or a result with isError and a
// message.
func refused(t *testing.T, c mcpCaller, tool string, args map[string]any) string {
	t.Helper()
	r, failed := c.callTool(t, tool, args)
	switch {
	case r == nil && failed != "":
		return "error: " + failed
	case r == nil:
		t.Fatalf("tools/call %s %v failed without a message", tool, args)
	case r.IsError && strings.TrimSpace(r.text()) != "":
		return "isError: " + r.text()
	}
	t.Fatalf("tools/call %s %v was not refused: isError %v, %q %s", tool, args, r.IsError, r.text(), r.Structured)
	return ""
}

// inspectorMessage drops the inspector's deprecation banner from its stderr.
func inspectorMessage(stderr string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(stderr), "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.Contains(l, "deprecated") && !strings.Contains(l, "Upgrade:") && !strings.Contains(l, "security fixes only") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, " | ")
}

// runResult is run's structured result.
type runResult struct {
	ExitCode      int       `json:"exit_code"`
	Signal        int       `json:"signal"`
	TimedOut      bool      `json:"timed_out"`
	SandboxDenied bool      `json:"sandbox_denied"`
	Limit         string    `json:"limit"`
	Stdout        runStream `json:"stdout"`
	Stderr        runStream `json:"stderr"`
	DurationMS    int64     `json:"duration_ms"`
	Executor      string    `json:"executor"`
	Sandbox       string    `json:"sandbox"`
}

type runStream struct {
	Text       string `json:"text"`
	TotalBytes int    `json:"total_bytes"`
	Truncated  bool   `json:"truncated"`
}

type readResult struct {
	Output       string `json:"output"`
	Cursor       int    `json:"cursor"`
	DroppedBytes int    `json:"dropped_bytes"`
	Running      bool   `json:"running"`
	ExitCode     int    `json:"exit_code"`
	Signal       int    `json:"signal"`
}

type startResult struct {
	Handle   string `json:"handle"`
	PID      int    `json:"pid"`
	Executor string `json:"executor"`
}

type readFileResult struct {
	Content   string `json:"content"`
	Binary    bool   `json:"binary"`
	Size      int64  `json:"size"`
	Offset    int64  `json:"offset"`
	Truncated bool   `json:"truncated"`
}

// TestMCPServerThroughTheInspector drives outpost mcp with the MCP
// Inspector CLI over stdio and Streamable HTTP: tools/list, run, the file
// tools, and the errors of an unknown tool and of arguments that break
// the input schema; over HTTP, the bearer token of --http-token-file.
func TestMCPServerThroughTheInspector(t *testing.T) {
	s := startMCPStack(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ws := mcpWorkspace(t)
			ep := s.endpoint(t, transport, ws)
			c := inspectorCaller{s, ep}

			t.Run("tools/list", func(t *testing.T) {
				t.Parallel()
				stdout, stderr, code := s.inspect(t, ep, "--method", "tools/list")
				if code != 0 {
					t.Fatalf("tools/list: exit %d: %s\nserver log:\n%s", code, inspectorMessage(stderr), ep.serverLog())
				}
				var list struct {
					Tools []struct {
						Name        string `json:"name"`
						Description string `json:"description"`
						InputSchema struct {
							Type       string                     `json:"type"`
							Properties map[string]json.RawMessage `json:"properties"`
						} `json:"inputSchema"`
					} `json:"tools"`
				}
				if err := json.Unmarshal([]byte(stdout), &list); err != nil {
					t.Fatalf("tools/list printed %q: %v", stdout, err)
				}
				got := map[string]bool{}
				for _, tool := range list.Tools {
					got[tool.Name] = true
					if tool.InputSchema.Type != "object" {
						t.Errorf("tool %s: inputSchema type %q, want object", tool.Name, tool.InputSchema.Type)
					}
					if tool.Description == "" {
						t.Errorf("tool %s has no description", tool.Name)
					}
					// Tools that name a handle reach its executor; executors
					// and list name none.
					if _, ok := tool.InputSchema.Properties["executor"]; !ok && !handleTools[tool.Name] {
						t.Errorf("tool %s: no \"executor\" in its input schema's properties", tool.Name)
					}
					if tool.Name == "run" {
						for _, p := range []string{"argv", "shell", "cwd", "env", "stdin", "timeout_ms", "sandbox", "network", "max_output_bytes"} {
							if _, ok := tool.InputSchema.Properties[p]; !ok {
								t.Errorf("run's input schema lacks %q", p)
							}
						}
					}
				}
				for _, name := range mcpTools {
					if !got[name] {
						t.Errorf("tools/list lacks %s; it has %v", name, slices.Sorted(maps.Keys(got)))
					}
				}
			})

			t.Run("run", func(t *testing.T) {
				t.Parallel()
				var r runResult
				res := mustCall(t, c, "run", map[string]any{"argv": []string{"sh", "-c", "echo hi; echo err >&2; exit 3"}}, &r)
				if r.ExitCode != 3 || r.Signal != 0 || r.TimedOut || r.SandboxDenied ||
					r.Stdout != (runStream{"hi\n", 3, false}) || r.Stderr != (runStream{"err\n", 4, false}) ||
					r.Executor != "e-1" || r.Sandbox != "workspace-write" {
					t.Fatalf("run: %s", res.Structured)
				}
				if res.IsError {
					t.Errorf("a command that exits 3 is a tool error: %q", res.text())
				}
				if txt := res.text(); !strings.Contains(txt, "hi\n") || !strings.Contains(txt, "err\n") {
					t.Errorf("run's text content %q lacks the output", txt)
				}
			})

			t.Run("files", func(t *testing.T) {
				t.Parallel()
				var none json.RawMessage
				mustCall(t, c, "write_file", map[string]any{"path": "sub/a.txt", "content": "alpha\nbeta\n", "create_dirs": true}, &none)
				if b, err := os.ReadFile(filepath.Join(ws, "sub", "a.txt")); err != nil || string(b) != "alpha\nbeta\n" {
					t.Fatalf("after write_file the file holds %q (%v)", b, err)
				}
				var rf readFileResult
				res := mustCall(t, c, "read_file", map[string]any{"path": "sub/a.txt"}, &rf)
				if rf.Content != "alpha\nbeta\n" || rf.Binary || rf.Size != 11 || rf.Truncated {
					t.Fatalf("read_file: %s", res.Structured)
				}
				var ed struct {
					Replacements int `json:"replacements"`
				}
				res = mustCall(t, c, "edit_file", map[string]any{"path": "sub/a.txt", "old_string": "beta", "new_string": "gamma"}, &ed)
				if ed.Replacements != 1 {
					t.Fatalf("edit_file: %s", res.Structured)
				}
				if b, err := os.ReadFile(filepath.Join(ws, "sub", "a.txt")); err != nil || string(b) != "alpha\ngamma\n" {
					t.Fatalf("after edit_file the file holds %q (%v)", b, err)
				}
			})

			t.Run("errors", func(t *testing.T) {
				t.Parallel()
				// As MCP has it: an unknown tool is a protocol error
				// (-32602, the inspector exits 1); arguments that break the
				// input schema are a tool error (isError), which a model
				// reads and corrects.
				how := refused(t, c, "no_such_tool", map[string]any{"x": "y"})
				if !strings.HasPrefix(how, "error: ") || !strings.Contains(how, "-32602") || !strings.Contains(how, "no_such_tool") {
					t.Errorf("unknown tool: %s; want a JSON-RPC error -32602 naming it", how)
				}
				t.Logf("unknown tool: %s", how)
				how = refused(t, c, "run", map[string]any{"argv": 42})
				if !strings.HasPrefix(how, "isError: ") || !strings.Contains(how, "argv") {
					t.Errorf("run with argv 42: %s; want isError naming argv", how)
				}
				t.Logf("run with argv 42: %s", how)
			})
		})
	}

	t.Run("http-bearer", func(t *testing.T) {
		t.Parallel()
		tokFile := filepath.Join(t.TempDir(), "tok")
		if err := os.WriteFile(tokFile, []byte("s3cret-mcp-token\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		ep := s.endpoint(t, "http", mcpWorkspace(t), "--http-token-file", tokFile)
		for _, header := range []string{"", "Authorization: Bearer wrong"} {
			args := []string{"--method", "tools/list"}
			if header != "" {
				args = append([]string{"--header", header}, args...)
			}
			if _, stderr, code := s.inspect(t, ep, args...); code == 0 {
				t.Fatalf("tools/list with header %q succeeded", header)
			} else {
				t.Logf("with header %q: exit %d: %s", header, code, inspectorMessage(stderr))
			}
		}
		if _, stderr, code := s.inspect(t, ep, "--header", "Authorization: Bearer s3cret-mcp-token", "--method", "tools/list"); code != 0 {
			t.Fatalf("tools/list with the bearer token: exit %d: %s\nserver log:\n%s", code, inspectorMessage(stderr), ep.serverLog())
		}
	})
}

// mcpDriverJS holds one MCP session open with the official TypeScript SDK
// (the inspector's): argv[2] is the SDK's dist/esm, argv[3] the transport
// as JSON ({command, args} for stdio, {url, headers} for Streamable HTTP).
// It prints {"ready":true} once connected and tools/list'ed, then answers
// each line of stdin, {"tool","args","progress":bool,"cancel_after_ms"},
// with a line {"result"} or {"error","code"} (and "progress", the
// progress messages); {"close":true} ends the session (an HTTP DELETE
// first) and prints {"closed":true}.
const mcpDriverJS = `
import { pathToFileURL } from "node:url";
import readline from "node:readline";
const [sdk, transportJSON] = process.argv.slice(2);
const load = (p) => import(pathToFileURL(sdk + "/" + p).href);
const { Client } = await load("client/index.js");
const conf = JSON.parse(transportJSON);
let transport;
if (conf.url) {
  const { StreamableHTTPClientTransport } = await load("client/streamableHttp.js");
  transport = new StreamableHTTPClientTransport(new URL(conf.url), conf.headers ? { requestInit: { headers: conf.headers } } : undefined);
} else {
  const { StdioClientTransport } = await load("client/stdio.js");
  transport = new StdioClientTransport({ command: conf.command, args: conf.args, env: process.env, stderr: "inherit" });
}
const out = (o) => process.stdout.write(JSON.stringify(o) + "\n");
const client = new Client({ name: "outpost-mcp-test-driver", version: "1.0.0" });
await client.connect(transport);
await client.listTools(); // caches the output schemas the SDK validates results with
out({ ready: true });
const rl = readline.createInterface({ input: process.stdin });
for await (const line of rl) {
  const req = JSON.parse(line);
  if (req.close) {
    if (transport.terminateSession) await transport.terminateSession();
    await client.close();
    out({ closed: true });
    process.exit(0);
  }
  const progress = [];
  const opts = { timeout: 60000 };
  if (req.progress) opts.onprogress = (p) => progress.push(p.message ?? "");
  if (req.cancel_after_ms) {
    const ac = new AbortController();
    opts.signal = ac.signal;
    setTimeout(() => ac.abort("cancelled by the test"), req.cancel_after_ms);
  }
  try {
    const result = await client.callTool({ name: req.tool, arguments: req.args ?? {} }, undefined, opts);
    out({ result, progress });
  } catch (e) {
    out({ error: String(e?.message ?? e), code: e?.code ?? 0, progress });
  }
}
await client.close();
process.exit(0);
`

// mcpSession is one MCP session held open by the driver.
type mcpSession struct {
	t      *testing.T
	ep     *mcpEndpoint
	stdin  io.WriteCloser
	lines  chan string
	stderr *syncBuffer
	exited chan struct{}
}

type driverReply struct {
	Result   *toolResult `json:"result"`
	Error    string      `json:"error"`
	Code     int         `json:"code"`
	Progress []string    `json:"progress"`
	Ready    bool        `json:"ready"`
	Closed   bool        `json:"closed"`
}

func (s *mcpStack) session(t *testing.T, ep *mcpEndpoint) *mcpSession {
	t.Helper()
	conf, _ := json.Marshal(ep.driver)
	cmd := exec.Command("node", s.driver, s.sdk, string(conf))
	cmd.Env = s.rs.Env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	m := &mcpSession{t: t, ep: ep, lines: make(chan string, 16), stderr: new(syncBuffer), exited: make(chan struct{})}
	cmd.Stderr = m.stderr
	var err error
	if m.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 16<<20)
		for sc.Scan() {
			m.lines <- sc.Text()
		}
		close(m.lines)
	}()
	go func() { cmd.Wait(); close(m.exited) }()
	t.Cleanup(func() {
		m.stdin.Close()
		select {
		case <-m.exited:
		case <-time.After(10 * time.Second):
			syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-m.exited
		}
	})
	if r := m.reply("connect"); !r.Ready {
		t.Fatalf("driver: %+v", r)
	}
	return m
}

func (m *mcpSession) reply(what string) driverReply {
	m.t.Helper()
	select {
	case l, ok := <-m.lines:
		if !ok {
			m.t.Fatalf("%s: the driver exited:\n%s\nserver log:\n%s", what, m.stderr.String(), m.ep.serverLog())
		}
		var r driverReply
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			m.t.Fatalf("%s: driver printed %q: %v", what, l, err)
		}
		return r
	case <-time.After(40 * time.Second):
		m.t.Fatalf("%s: no answer within 40s:\n%s\nserver log:\n%s", what, m.stderr.String(), m.ep.serverLog())
	}
	return driverReply{}
}

func (m *mcpSession) send(req map[string]any) {
	m.t.Helper()
	raw, _ := json.Marshal(req)
	if _, err := m.stdin.Write(append(raw, '\n')); err != nil {
		m.t.Fatalf("driver stdin: %v\n%s", err, m.stderr.String())
	}
}

// call calls tool with args; extra are more request members (progress,
// cancel_after_ms).
func (m *mcpSession) call(tool string, args map[string]any, extra ...any) driverReply {
	m.t.Helper()
	req := map[string]any{"tool": tool, "args": args}
	for i := 0; i+1 < len(extra); i += 2 {
		req[extra[i].(string)] = extra[i+1]
	}
	m.send(req)
	return m.reply("tools/call " + tool)
}

func (m *mcpSession) serverLog() string {
	return "driver stderr:\n" + m.stderr.String() + "\nserver log:\n" + m.ep.serverLog()
}

func (m *mcpSession) callTool(t *testing.T, tool string, args map[string]any) (*toolResult, string) {
	t.Helper()
	r := m.call(tool, args)
	if r.Result == nil {
		return nil, fmt.Sprintf("%s (code %d)", r.Error, r.Code)
	}
	return r.Result, ""
}

// mustCall calls tool and decodes its structured result into v.
func (m *mcpSession) mustCall(tool string, args map[string]any, v any) *toolResult {
	m.t.Helper()
	r := m.call(tool, args)
	if r.Result == nil {
		m.t.Fatalf("tools/call %s %v: %s (code %d)\ndriver stderr:\n%s\nserver log:\n%s", tool, args, r.Error, r.Code, m.stderr.String(), m.ep.serverLog())
	}
	r.Result.decode(m.t, "tools/call "+tool, v)
	return r.Result
}

// close ends the session.
func (m *mcpSession) close() {
	m.t.Helper()
	m.send(map[string]any{"close": true})
	if r := m.reply("close"); !r.Closed {
		m.t.Fatalf("close: %+v", r)
	}
}

// readUntilExit reads handle from cursor 0 with wait_ms until it has
// exited, and returns all its output and the last read.
func (m *mcpSession) readUntilExit(handle string, d time.Duration) (string, readResult) {
	m.t.Helper()
	var out strings.Builder
	cursor := 0
	deadline := time.Now().Add(d)
	for reads := 1; ; reads++ {
		var r readResult
		res := m.mustCall("read", map[string]any{"handle": handle, "cursor": cursor, "wait_ms": 2000}, &r)
		if r.Cursor < cursor || r.Cursor-cursor != len(r.Output)+r.DroppedBytes {
			m.t.Fatalf("read from cursor %d: %s", cursor, res.Structured)
		}
		out.WriteString(r.Output)
		cursor = r.Cursor
		if !r.Running {
			return out.String(), r
		}
		if time.Now().After(deadline) {
			m.t.Fatalf("%s still running after %v and %d reads; output %q", handle, d, reads, out.String())
		}
	}
}

// tickStops waits up to d for the file a tick loop rewrites every 50ms to
// stop changing, and reports whether it did.
func tickStops(path string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	last, _ := os.ReadFile(path)
	stable := time.Now()
	for time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
		b, _ := os.ReadFile(path)
		if string(b) != string(last) {
			last, stable = b, time.Now()
		} else if time.Since(stable) > 600*time.Millisecond {
			return true
		}
	}
	return false
}

const tickLoop = "while :; do date +%s%N > tick; sleep 0.05; done"

// TestMCPServerSessionsThroughTheSDK holds MCP sessions open with the
// inspector's TypeScript SDK over stdio and Streamable HTTP: the rest of
// run (shell, env, stdin, cwd, timeout, output bounds, sandbox modes), the
// rest of the file tools, executors, more refused arguments; start then
// read with wait_ms until the output and the exit appear, write_stdin,
// list, terminate, signal; run's progress notifications, cancellation,
// and a session's processes ending with it.
func TestMCPServerSessionsThroughTheSDK(t *testing.T) {
	s := startMCPStack(t)
	for _, transport := range []string{"stdio", "http"} {
		t.Run(transport, func(t *testing.T) {
			t.Parallel()
			ws := mcpWorkspace(t)
			ep := s.endpoint(t, transport, ws)

			t.Run("tools", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				var r runResult
				// shell, env, stdin, and the workspace as the cwd.
				res := mustCall(t, m, "run", map[string]any{"shell": "pwd; echo $FOO; cat", "env": map[string]string{"FOO": "bar baz"}, "stdin": "from stdin\n"}, &r)
				if want := ws + "\nbar baz\nfrom stdin\n"; r.ExitCode != 0 || r.Stdout.Text != want {
					t.Fatalf("run shell: want stdout %q: %s", want, res.Structured)
				}
				// A relative cwd is in the workspace.
				if err := os.Mkdir(filepath.Join(ws, "d"), 0o755); err != nil {
					t.Fatal(err)
				}
				res = mustCall(t, m, "run", map[string]any{"argv": []string{"pwd"}, "cwd": "d"}, &r)
				if r.Stdout.Text != filepath.Join(ws, "d")+"\n" {
					t.Fatalf("run cwd d: %s", res.Structured)
				}
				res = mustCall(t, m, "run", map[string]any{"argv": []string{"sleep", "20"}, "timeout_ms": 300}, &r)
				if !r.TimedOut || r.DurationMS > 10000 {
					t.Fatalf("run with timeout_ms 300: %s", res.Structured)
				}
				// seq 1 100000 is 588895 bytes: a head and a tail of it.
				res = mustCall(t, m, "run", map[string]any{"shell": "seq 1 100000", "max_output_bytes": 1000}, &r)
				if r.ExitCode != 0 || !r.Stdout.Truncated || r.Stdout.TotalBytes != 588895 || len(r.Stdout.Text) > 2000 ||
					!strings.HasPrefix(r.Stdout.Text, "1\n2\n3\n") || !strings.HasSuffix(r.Stdout.Text, "99999\n100000\n") {
					t.Fatalf("run with max_output_bytes 1000: %s", res.Structured)
				}

				// The sandbox: read-only cannot write; full-access is not
				// among the default --allow-sandbox.
				res = mustCall(t, m, "run", map[string]any{"shell": "echo x > ro-attempt", "sandbox": "read-only"}, &r)
				if r.ExitCode == 0 || r.Sandbox != "read-only" {
					t.Fatalf("read-only run that writes: %s", res.Structured)
				}
				if _, err := os.Stat(filepath.Join(ws, "ro-attempt")); !os.IsNotExist(err) {
					t.Fatalf("a read-only run wrote in the workspace (%v)", err)
				}
				if how := refused(t, m, "run", map[string]any{"argv": []string{"true"}, "sandbox": "full-access"}); !strings.Contains(how, "full-access") {
					t.Errorf("refusal of full-access: %s", how)
				}

				// The file tools beyond write, read and edit.
				var none json.RawMessage
				mustCall(t, m, "write_file", map[string]any{"path": "sub/a.txt", "content": "alpha\ngamma\n", "create_dirs": true}, &none)
				var rf readFileResult
				res = mustCall(t, m, "read_file", map[string]any{"path": filepath.Join(ws, "sub", "a.txt"), "offset": 6, "length": 3}, &rf)
				if rf.Content != "gam" || rf.Offset != 6 || rf.Size != 12 {
					t.Fatalf("read_file offset 6 length 3: %s", res.Structured)
				}
				how := refused(t, m, "edit_file", map[string]any{"path": "sub/a.txt", "old_string": "delta", "new_string": "x"})
				if b, _ := os.ReadFile(filepath.Join(ws, "sub", "a.txt")); string(b) != "alpha\ngamma\n" {
					t.Fatalf("a refused edit_file (%s) left %q", how, b)
				}
				if err := os.WriteFile(filepath.Join(ws, "sub", "bin"), []byte{0, 1, 2, 0xff, 0xfe, 0}, 0o644); err != nil {
					t.Fatal(err)
				}
				res = mustCall(t, m, "read_file", map[string]any{"path": "sub/bin"}, &rf)
				if !rf.Binary || rf.Size != 6 {
					t.Fatalf("read_file of binary: %s", res.Structured)
				}
				type entry struct {
					Name string `json:"name"`
					Type string `json:"type"`
					Size int64  `json:"size"`
				}
				var ls struct {
					Entries []entry `json:"entries"`
				}
				res = mustCall(t, m, "list_directory", map[string]any{"path": "sub"}, &ls)
				if !slices.Contains(ls.Entries, entry{"a.txt", "file", 12}) {
					t.Fatalf("list_directory sub: %s", res.Structured)
				}
				var se struct {
					Matches []struct {
						Path string `json:"path"`
						Line int    `json:"line"`
						Text string `json:"text"`
					} `json:"matches"`
					Truncated bool `json:"truncated"`
				}
				res = mustCall(t, m, "search", map[string]any{"path": ".", "name_glob": "*.txt", "content": "gamma"}, &se)
				if len(se.Matches) != 1 || !strings.HasSuffix(se.Matches[0].Path, "a.txt") || se.Matches[0].Line != 2 || !strings.Contains(se.Matches[0].Text, "gamma") {
					t.Fatalf("search: %s", res.Structured)
				}

				var ex struct {
					Executors []struct {
						ID     string `json:"id"`
						Online bool   `json:"online"`
					} `json:"executors"`
				}
				res = mustCall(t, m, "executors", nil, &ex)
				if len(ex.Executors) != 1 || ex.Executors[0].ID != "e-1" || !ex.Executors[0].Online {
					t.Fatalf("executors: %s", res.Structured)
				}

				// Arguments the input schema or the tool refuses; the SDK
				// sends "soon" as it is (the inspector would make it NaN).
				for _, args := range []map[string]any{
					{"argv": []string{"true"}, "timeout_ms": "soon"},
					{"argv": []string{"true"}, "shell": "true"},
					{},
					{"argv": []string{"true"}, "executor": "e-2"},
				} {
					t.Logf("run %v: %s", args, refused(t, m, "run", args))
				}
				t.Logf("read of an unknown handle: %s", refused(t, m, "read", map[string]any{"handle": "h999"}))
				m.close()
			})

			t.Run("start-read", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				var st startResult
				res := m.mustCall("start", map[string]any{"argv": []string{"sh", "-c", "echo one; sleep 0.3; echo two >&2; sleep 0.3; echo three; exit 5"}}, &st)
				if st.Handle == "" || st.PID <= 0 || st.Executor != "e-1" {
					t.Fatalf("start: %s", res.Structured)
				}
				out, last := m.readUntilExit(st.Handle, 15*time.Second)
				if out != "one\ntwo\nthree\n" || last.ExitCode != 5 || last.Signal != 0 || last.DroppedBytes != 0 {
					t.Fatalf("read: output %q, last read %+v", out, last)
				}
				// Reading again from 0 replays it; after the end, nothing.
				var r readResult
				m.mustCall("read", map[string]any{"handle": st.Handle, "cursor": 0}, &r)
				if r.Output != out || r.Running || r.ExitCode != 5 {
					t.Fatalf("read from 0 after the exit: %+v", r)
				}
				m.mustCall("read", map[string]any{"handle": st.Handle, "cursor": len(out), "wait_ms": 200}, &r)
				if r.Output != "" || r.Cursor != len(out) || r.Running {
					t.Fatalf("read at the end: %+v", r)
				}

				// write_stdin, then closing stdin.
				var cat startResult
				m.mustCall("start", map[string]any{"argv": []string{"sh", "-c", "read x; echo got:$x; cat; echo end"}}, &cat)
				var w struct {
					Written int  `json:"written"`
					Closed  bool `json:"closed"`
				}
				res = m.mustCall("write_stdin", map[string]any{"handle": cat.Handle, "data": "abc\n"}, &w)
				if w.Written != 4 || w.Closed {
					t.Fatalf("write_stdin: %s", res.Structured)
				}
				res = m.mustCall("write_stdin", map[string]any{"handle": cat.Handle, "data": "rest", "close": true}, &w)
				if w.Written != 4 || !w.Closed {
					t.Fatalf("write_stdin close: %s", res.Structured)
				}
				if out, last := m.readUntilExit(cat.Handle, 15*time.Second); out != "got:abc\nrestend\n" || last.ExitCode != 0 {
					t.Fatalf("after write_stdin: %q %+v", out, last)
				}

				// terminate a long-running one; list shows all three.
				var sl startResult
				m.mustCall("start", map[string]any{"argv": []string{"sleep", "30"}}, &sl)
				var term struct {
					WasRunning bool `json:"was_running"`
				}
				res = m.mustCall("terminate", map[string]any{"handle": sl.Handle}, &term)
				if !term.WasRunning {
					t.Fatalf("terminate: %s", res.Structured)
				}
				if _, last := m.readUntilExit(sl.Handle, 15*time.Second); last.Signal == 0 && last.ExitCode == 0 {
					t.Fatalf("terminated sleep: %+v", last)
				}
				var ls struct {
					Processes []struct {
						Handle   string   `json:"handle"`
						Argv     []string `json:"argv"`
						Executor string   `json:"executor"`
						Running  bool     `json:"running"`
						ExitCode int      `json:"exit_code"`
					} `json:"processes"`
				}
				res = m.mustCall("list", nil, &ls)
				handles := map[string]int{}
				for _, p := range ls.Processes {
					if p.Running || p.Executor != "e-1" || len(p.Argv) == 0 {
						t.Errorf("list: %+v", p)
					}
					handles[p.Handle] = p.ExitCode
				}
				if len(handles) != 3 || handles[st.Handle] != 5 || handles[cat.Handle] != 0 {
					t.Fatalf("list: %s", res.Structured)
				}
				m.close()
			})

			t.Run("signal", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				var st startResult
				m.mustCall("start", map[string]any{"argv": []string{"sh", "-c", "trap 'echo got-int; exit 7' INT; echo ready; while :; do sleep 0.05; done"}}, &st)
				var r readResult
				deadline := time.Now().Add(10 * time.Second)
				for !strings.Contains(r.Output, "ready") {
					m.mustCall("read", map[string]any{"handle": st.Handle, "cursor": 0, "wait_ms": 1000}, &r)
					if time.Now().After(deadline) {
						t.Fatalf("no ready: %+v", r)
					}
				}
				var none json.RawMessage
				m.mustCall("signal", map[string]any{"handle": st.Handle, "signal": "INT"}, &none)
				if out, last := m.readUntilExit(st.Handle, 10*time.Second); !strings.Contains(out, "got-int") || last.ExitCode != 7 {
					t.Fatalf("after INT: %q %+v", out, last)
				}
				if r := m.call("signal", map[string]any{"handle": st.Handle, "signal": "BOGUS"}); r.Result != nil && !r.Result.IsError {
					t.Fatalf("signal BOGUS: %s", r.Result.Structured)
				}
			})

			t.Run("progress", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				r := m.call("run", map[string]any{"shell": "echo first; sleep 0.5; echo second"}, "progress", true)
				if r.Result == nil || r.Result.IsError {
					t.Fatalf("run with a progress token: %+v", r)
				}
				if all := strings.Join(r.Progress, ""); !strings.Contains(all, "first") {
					t.Fatalf("progress messages %q lack the output", r.Progress)
				}
				t.Logf("progress messages: %q", r.Progress)
			})

			t.Run("cancel", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				dir := filepath.Join(ws, "cancel")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				start := time.Now()
				r := m.call("run", map[string]any{"shell": tickLoop, "cwd": "cancel", "timeout_ms": 30000}, "cancel_after_ms", 1000)
				if r.Result != nil || time.Since(start) > 10*time.Second {
					t.Fatalf("cancelled run: %+v after %v", r, time.Since(start))
				}
				if _, err := os.Stat(filepath.Join(dir, "tick")); err != nil {
					t.Fatalf("the cancelled run never ticked: %v", err)
				}
				if !tickStops(filepath.Join(dir, "tick"), 5*time.Second) {
					t.Fatal("notifications/cancelled did not terminate the run")
				}
				// The session goes on.
				var rr runResult
				if m.mustCall("run", map[string]any{"argv": []string{"echo", "after"}}, &rr); rr.Stdout.Text != "after\n" {
					t.Fatalf("run after a cancel: %+v", rr)
				}
			})

			t.Run("session-end", func(t *testing.T) {
				t.Parallel()
				m := s.session(t, ep)
				dir := filepath.Join(ws, "session-end")
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				var st startResult
				m.mustCall("start", map[string]any{"shell": tickLoop, "cwd": "session-end"}, &st)
				deadline := time.Now().Add(10 * time.Second)
				for {
					if _, err := os.Stat(filepath.Join(dir, "tick")); err == nil {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("the started loop never ticked")
					}
					time.Sleep(20 * time.Millisecond)
				}
				closing := time.Now()
				m.close()
				closed := time.Since(closing)
				if !tickStops(filepath.Join(dir, "tick"), 8*time.Second) {
					t.Fatalf("a started process outlived its MCP session (closed in %v)\n%s", closed, m.serverLog())
				}
				t.Logf("session closed in %v", closed)
			})
		})
	}
}
