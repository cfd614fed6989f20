package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// unsetenv removes name for the test (restored afterwards).
func unsetenv(t *testing.T, name string) {
	t.Setenv(name, "")
	os.Unsetenv(name)
}

func TestBridgeUsageErrorsExitTwo(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_CONNECTION_TOKEN", "CODEX_EXEC_SERVER_CONNECTION_TOKEN"} {
		unsetenv(t, name)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir()) // no config file target
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	target := "tcp://127.0.0.1:1#" + k.PublicKey().Fingerprint()
	relayURL := "outpost://127.0.0.1:1#" + k.PublicKey().Fingerprint()
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--relay", relayURL}, "--relay needs --executor"},
		{[]string{"--relay", relayURL, "--token", "t"}, "--relay needs --executor"},
		{[]string{"--executor", "build-1"}, "--executor needs --relay"},
		{[]string{"--relay", relayURL, "--executor", "build-1", "--target", target}, "not both"},
		{[]string{"--target", target, "--listen", "ws://0.0.0.0:0"}, "not loopback, without a token"},
		{[]string{"--target", target, "--listen", "ws://192.0.2.1:7000"}, "not loopback, without a token"},
		{[]string{"--target", target, "--ws-auth", "capability-token"}, "needs --ws-token-file or --ws-token-sha256"},
		{[]string{"--target", target, "--ws-auth", "capability-token", "--ws-token-file", "relative/tok"}, "must be an absolute path"},
		{[]string{"--target", target, "--ws-auth", "capability-token", "--ws-token-sha256", "abcd"}, "must be 64 hex digits"},
		{[]string{"--target", target, "--ws-token-sha256", strings.Repeat("ab", 32)}, "need --ws-auth capability-token"},
		{[]string{"--target", target, "--ws-auth", "signed-bearer-token"}, "only capability-token"},
		{[]string{"--target", target, "--listen", "ws://localhost:0"}, "expected `ws://IP:PORT`"},
		{[]string{"--target", target, "--listen", "tcp://127.0.0.1:0"}, "expected `ws://IP:PORT`"},
		{[]string{"--target", "ws://127.0.0.1:1"}, "want tcp://HOST:PORT#<fingerprint> or unix:///path"},
		{[]string{}, "no executor"},
		{[]string{"--target", target, "extra"}, "unexpected argument"},
		{[]string{"--nope"}, "flag provided but not defined"},
	} {
		var out, errb bytes.Buffer
		if code := run(append([]string{"bridge"}, c.args...), &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2 (stderr %q)", c.args, code, errb.String())
		}
		if !strings.Contains(errb.String(), c.want) {
			t.Errorf("%v: stderr %q lacks %q", c.args, errb.String(), c.want)
		}
		if out.Len() != 0 {
			t.Errorf("%v: stdout %q", c.args, out.String())
		}
	}
	// An empty token is refused as by executor serve.
	t.Setenv("OUTPOST_CONNECTION_TOKEN", "")
	var out, errb bytes.Buffer
	if code := run([]string{"bridge", "--target", target}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "OUTPOST_CONNECTION_TOKEN is set but empty") {
		t.Errorf("empty token: exit %d, stderr %q", code, errb.String())
	}
}

func TestBridgeUnreachableExecutorExits121(t *testing.T) {
	unsetenv(t, "OUTPOST_CONNECTION_TOKEN")
	unsetenv(t, "CODEX_EXEC_SERVER_CONNECTION_TOKEN")
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	k, _ := identity.Generate()
	var out, errb bytes.Buffer
	if code := run([]string{"bridge", "--target", "tcp://127.0.0.1:1#" + k.PublicKey().Fingerprint()}, &out, &errb); code != exitTransport {
		t.Fatalf("exit %d, want %d (stderr %q)", code, exitTransport, errb.String())
	}
	if !strings.Contains(errb.String(), "cannot reach the executor") {
		t.Fatalf("stderr %q", errb.String())
	}
}

// TestBridgeServesCodexForAnExecutor runs the binaries: an executor on
// tcp://, and `outpost bridge` to it listening on every address with a
// connection token; a JSON-RPC client runs a command through the bridge.
func TestBridgeServesCodexForAnExecutor(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	cmd := exec.Command(outpostBin, "bridge", "--target", target, "--listen", "ws://0.0.0.0:0")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir(), "OUTPOST_CONNECTION_TOKEN=tok")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("no URL: %v; stderr %s", err, stderr.String())
	}
	printed := strings.TrimSpace(line)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(printed, "ws://"))
	if !strings.HasPrefix(printed, "ws://") || err != nil {
		t.Fatalf("printed %q", printed)
	}
	url := "ws://127.0.0.1:" + port

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := client.DialWS(ctx, url, client.DialOptions{}, nil); err == nil || !strings.Contains(err.Error(), "401") {
		t.Fatalf("without the token: %v", err)
	}
	notes := make(chan [2]any, 64)
	rpc, err := client.DialWS(ctx, url, client.DialOptions{Token: "tok"}, func(method string, params transport.Params) {
		var m map[string]any
		params.Decode(&m)
		notes <- [2]any{method, m}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer rpc.Close()
	var init protocol.InitializeResult
	if err := rpc.Call(ctx, protocol.MethodInitialize, protocol.InitializeParams{ClientName: "codex"}, &init); err != nil || init.SessionID == "" {
		t.Fatalf("initialize: %+v %v", init, err)
	}
	rpc.Notify(ctx, protocol.MethodInitialized, struct{}{})
	var res protocol.StartResult
	err = rpc.Call(ctx, protocol.MethodProcessStart, protocol.ExecParams{ProcessID: "p", Argv: []string{"/bin/sh", "-c", "echo through the bridge; exit 5"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}, &res)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for n := range notes {
		m := n[1].(map[string]any)
		got = append(got, n[0].(string))
		switch n[0] {
		case protocol.MethodProcessOutput:
			if m["chunk"] != "dGhyb3VnaCB0aGUgYnJpZGdlCg==" { // base64("through the bridge\n")
				t.Fatalf("output %v", m)
			}
		case protocol.MethodProcessExited:
			if m["exitCode"] != float64(5) {
				t.Fatalf("exited %v", m)
			}
		}
		if n[0] == protocol.MethodProcessClosed {
			break
		}
	}
	if strings.Join(got, " ") != "process/output process/exited process/closed" {
		t.Fatalf("notifications %v", got)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bridge exit: %v; stderr %s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the bridge did not stop on SIGTERM")
	}
}

// TestBridgeServesCodexOnStdio runs `outpost bridge --listen stdio` as
// codex runs an environments.toml program: JSON-RPC lines on its stdin
// and stdout, nothing else on stdout, logs on stderr; it ends when stdin
// closes.
func TestBridgeServesCodexOnStdio(t *testing.T) {
	target, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	cmd := exec.Command(outpostBin, "bridge", "--target", target, "--listen", "stdio")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(stdout)
	lines.Buffer(nil, 1<<20)
	send := func(s string) {
		if _, err := io.WriteString(stdin, s+"\n"); err != nil {
			t.Fatal(err)
		}
	}
	next := func() map[string]any {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("stdout ended: %v; stderr %s", lines.Err(), stderr.String())
		}
		var m map[string]any
		if err := json.Unmarshal(lines.Bytes(), &m); err != nil {
			t.Fatalf("stdout line %q is not JSON: %v", lines.Text(), err)
		}
		return m
	}
	send(`{"id":1,"method":"initialize","params":{"clientName":"codex"}}`)
	init := next()
	res, _ := init["result"].(map[string]any)
	if res == nil || res["sessionId"] == "" || res["environmentInfo"] == nil {
		t.Fatalf("initialize: %v", init)
	}
	send(`{"method":"initialized"}`)
	send(`{"id":2,"method":"process/start","params":{"processId":"p","argv":["/bin/sh","-c","echo over stdio; exit 4"],"cwd":"/","env":{"PATH":"/usr/bin:/bin"},"tty":false}}`)
	var got []string
	for len(got) == 0 || got[len(got)-1] != protocol.MethodProcessClosed {
		m := next()
		if m["id"] != nil {
			if m["error"] != nil {
				t.Fatalf("start: %v", m)
			}
			got = append(got, "reply")
			continue
		}
		got = append(got, m["method"].(string))
		p, _ := m["params"].(map[string]any)
		switch m["method"] {
		case protocol.MethodProcessOutput:
			if p["chunk"] != base64.StdEncoding.EncodeToString([]byte("over stdio\n")) {
				t.Fatalf("output %v", m)
			}
		case protocol.MethodProcessExited:
			if p["exitCode"] != float64(4) {
				t.Fatalf("exited %v", m)
			}
		}
	}
	if strings.Join(got, " ") != "reply process/output process/exited process/closed" {
		t.Fatalf("messages %v", got)
	}
	stdin.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("bridge exit: %v; stderr %s", err, stderr.String())
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the bridge did not end with its stdin")
	}
}
