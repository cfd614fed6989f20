package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/mcpserver"
	"github.com/outpost-exec/outpost/protocol"
)

// mcpTargetRatio is the target: an MCP run of /bin/true through
// the relay takes at most this many times outpost's own start-to-exit on
// an established session through the relay, in the same sandbox.
const mcpTargetRatio = 1.5

// mcpCall times the run tool of `outpost mcp` (stdio, through the relay
// to the bench's joined executor): one tools/call of run with argv
// ["true"], from the request written to its response read, on one MCP
// session initialized once. Beside each, in the same sandbox mode, the
// same command on the same executor through the relay with the client
// package on an established session, as start_to_exit's outpost-relay:
//
//   - read-only: the MCP server's own sandbox (its default is
//     workspace-write; read-only is the mode a model may ask for that
//     both sides can name the same way), against the client sending the
//     same read-only policy.
//   - full-access: no sandbox (the executor runs a full-access policy as
//     is), against the client sending the same policy — the pair
//     comparable with start_to_exit's unsandboxed outpost-relay.
//
// The three of a mode take turns run by run (the first of each turn
// rotating), so each sees the same machine: timed one target after the
// other, on a 2-core VM, the MCP/client ratio moved between 1.1× and
// 1.7× from one run of the bench to the next. Each MCP row's notes give
// its ratio to its pair and the target.
func (b *bench) mcpCall() {
	const metric = "mcp_call"
	ws := filepath.Join(b.dir, "mcp-ws")
	err := os.MkdirAll(ws, 0o755)
	var env client.Environment
	if err == nil {
		if env, err = b.connect("outpost-relay"); err == nil {
			defer env.Close()
		}
	}
	envErr := err
	var m *mcpProc
	if err == nil {
		if m, err = startMCP(b.bin, b.relay, "bench", b.token, ws, filepath.Join(b.dir, "mcp")); err == nil {
			defer m.stop()
		}
	}
	mcpErr := err
	for _, mode := range []string{"read-only", "full-access"} {
		pol := map[string]any{"mode": mode, "network": false}
		base := &turn{target: "outpost-relay-" + mode, err: envErr, f: func() error { return runOnSession(env, ws, pol) }}
		// client.Exec with the request the MCP server's run makes: what
		// of the MCP row's time is Exec's, not the MCP layer's.
		ex := &turn{target: "outpost-relay-exec-" + mode, err: envErr, f: func() error { return execOnSession(env, ws, pol) }}
		call := &turn{target: "outpost-mcp-relay-" + mode, err: mcpErr}
		if mcpErr == nil {
			req, err := m.runRequest(mode)
			call.err = err
			call.f = func() error { return m.callRun(req, mode) }
		}
		rs := b.takingTurns(metric, *runs, []*turn{base, ex, call})
		if r, pair := rs[2], rs[0]; r.P50Ms != nil && pair.P50Ms != nil && *pair.P50Ms > 0 {
			ratio := *r.P50Ms / *pair.P50Ms
			met := "met"
			if ratio > mcpTargetRatio {
				met = "not met"
			}
			r.Notes = fmt.Sprintf("%.2f× %s p50 (target ≤ %.1f×: %s)", ratio, base.target, mcpTargetRatio, met)
		}
	}
}

// turn is one target of takingTurns: f is one timed run; err, when set,
// skips it.
type turn struct {
	target string
	f      func() error
	err    error
	d      []time.Duration
}

// takingTurns times n runs of each turn, one run of each in turn (the
// first rotating), after a warm-up run of each, and records each's
// p50/p99 like timed; a turn whose run fails is skipped from then on.
// It returns the rows it added, in the order of ts.
func (b *bench) takingTurns(metric string, n int, ts []*turn) []*Result {
	for _, t := range ts {
		if t.err == nil {
			t.err = t.f()
		}
	}
	for i := range n {
		for j := range ts {
			t := ts[(i+j)%len(ts)]
			if t.err != nil {
				continue
			}
			t0 := time.Now()
			if t.err = t.f(); t.err == nil {
				t.d = append(t.d, time.Since(t0))
			}
		}
	}
	first := len(b.results)
	for _, t := range ts {
		if t.err != nil {
			b.skip(metric, t.target, t.err.Error())
			continue
		}
		p50, p99 := peers.Percentiles(t.d)
		b.add(Result{Metric: metric, Target: t.target, Runs: n, P50Ms: f64(p50), P99Ms: f64(p99)})
	}
	out := make([]*Result, len(ts))
	for i := range ts {
		out[i] = &b.results[first+i]
	}
	return out
}

// runOnSession runs /bin/true in dir on env under policy to its close, as
// startRemote does, and checks that it exited 0.
func runOnSession(env client.Environment, dir string, policy any) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := env.Start(ctx, protocol.ExecParams{Argv: []string{"true"}, Cwd: dir, Env: env0, Sandbox: policy})
	if err != nil {
		return err
	}
	code := -1
	for ev := range p.Events() {
		switch ev.Kind {
		case client.EventFailed:
			return ev.Err
		case client.EventExited:
			code = int(ev.ExitCode)
		}
	}
	if code != 0 {
		return fmt.Errorf("true exited %d", code)
	}
	return nil
}

// execOnSession runs true with client.Exec as the MCP server's run tool
// does (mcpserver/run.go): the core environment inherited, the default
// timeout and output cap, cwd dir, policy.
func execOnSession(env client.Environment, dir string, policy any) error {
	res, err := client.Exec(context.Background(), env, client.ExecRequest{Argv: []string{"true"}, Cwd: dir, InheritEnv: true, Sandbox: policy,
		Timeout: mcpserver.DefaultTimeout, OutputCap: mcpserver.DefaultOutputBytes})
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("true exited %d", res.ExitCode)
	}
	return nil
}

// mcpProc is a running `outpost mcp` on stdio with its session
// initialized: newline-delimited JSON-RPC on its stdin and stdout.
type mcpProc struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	out    *bufio.Reader
	stderr *bytes.Buffer
	id     int
}

// startMCP starts `outpost mcp` to executor through relay (its own XDG
// directories under dir, the workspace ws, full-access allowed beside the
// default modes) and does the MCP initialize handshake.
func startMCP(bin, relay, executor, token, ws, dir string) (*mcpProc, error) {
	cmd := exec.Command(bin, "mcp", "--relay", relay, "--executor", executor, "--token", token,
		"--workspace", ws, "--allow-sandbox", "read-only,workspace-write,full-access")
	// The default log level: the audit line per call is part of the cost.
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "config"), "XDG_STATE_HOME="+filepath.Join(dir, "state"))
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	m := &mcpProc{cmd: cmd, in: in, out: bufio.NewReaderSize(out, 1<<20), stderr: &bytes.Buffer{}}
	cmd.Stderr = &tailWriter{buf: m.stderr, max: 64 << 10}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	init, err := m.request("initialize", map[string]any{
		"protocolVersion": "2025-06-18",
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]any{"name": "outpost-bench", "version": "0"},
	})
	if err == nil {
		_, err = m.roundTrip(init)
	}
	if err == nil {
		err = m.write(map[string]any{"jsonrpc": "2.0", "method": "notifications/initialized"})
	}
	if err != nil {
		m.stop()
		return nil, fmt.Errorf("outpost mcp: initialize: %w: %s", err, strings.TrimSpace(lastLines(m.stderr.Bytes(), 3)))
	}
	return m, nil
}

// request marshals a JSON-RPC request with the next id.
func (m *mcpProc) request(method string, params any) ([]byte, error) {
	m.id++
	return json.Marshal(map[string]any{"jsonrpc": "2.0", "id": m.id, "method": method, "params": params})
}

func (m *mcpProc) write(msg any) error {
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	_, err = m.in.Write(append(data, '\n'))
	return err
}

// mcpResponse is a JSON-RPC response (or a message from the server that
// is not one: a notification or request, with a method).
type mcpResponse struct {
	ID     *int            `json:"id"`
	Method string          `json:"method"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// roundTrip writes req (one line) and reads lines until the response to
// it, skipping the server's notifications.
func (m *mcpProc) roundTrip(req []byte) (json.RawMessage, error) {
	if _, err := m.in.Write(append(req, '\n')); err != nil {
		return nil, err
	}
	for {
		line, err := m.out.ReadBytes('\n')
		if err != nil {
			return nil, fmt.Errorf("reading the response: %w", err)
		}
		var r mcpResponse
		if err := json.Unmarshal(line, &r); err != nil {
			return nil, fmt.Errorf("response %q: %w", bytes.TrimSpace(line), err)
		}
		if r.Method != "" || r.ID == nil || *r.ID != m.id {
			continue
		}
		if r.Error != nil {
			return nil, fmt.Errorf("JSON-RPC error %d: %s", r.Error.Code, r.Error.Message)
		}
		return r.Result, nil
	}
}

// runRequest is the tools/call of run with argv ["true"] in sandbox mode.
// Every call reuses its id: the calls are one at a time, and the id only
// pairs a response with its request.
func (m *mcpProc) runRequest(mode string) ([]byte, error) {
	return m.request("tools/call", map[string]any{"name": "run", "arguments": map[string]any{"argv": []string{"true"}, "sandbox": mode}})
}

// callRun sends req and checks the structured result: exit 0 in mode.
func (m *mcpProc) callRun(req []byte, mode string) error {
	raw, err := m.roundTrip(req)
	if err != nil {
		return err
	}
	var res struct {
		IsError    bool                    `json:"isError"`
		Content    []struct{ Text string } `json:"content"`
		Structured *struct {
			ExitCode int    `json:"exit_code"`
			Sandbox  string `json:"sandbox"`
		} `json:"structuredContent"`
	}
	if err := json.Unmarshal(raw, &res); err != nil {
		return err
	}
	if res.IsError || res.Structured == nil {
		var texts []string
		for _, c := range res.Content {
			texts = append(texts, c.Text)
		}
		return errors.New("run: " + strings.Join(texts, "; "))
	}
	if res.Structured.ExitCode != 0 || res.Structured.Sandbox != mode {
		return fmt.Errorf("run: exit %d in sandbox %q, want exit 0 in %s", res.Structured.ExitCode, res.Structured.Sandbox, mode)
	}
	return nil
}

// stop closes the server's stdin (the end of its session) and waits for
// it, killing it after 10 s.
func (m *mcpProc) stop() {
	m.in.Close()
	done := make(chan struct{})
	go func() { m.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		m.cmd.Process.Kill()
		<-done
	}
}

// tailWriter keeps about the last max bytes written to it.
type tailWriter struct {
	buf *bytes.Buffer
	max int
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.buf.Write(p)
	if over := w.buf.Len() - w.max; over > 0 {
		w.buf.Next(over)
	}
	return len(p), nil
}
