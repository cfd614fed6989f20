package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"
	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/internal/wine"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

var outpostBin string

func TestMain(m *testing.M) {
	// In-process commands (doctor, demo) may re-execute this binary as
	// the sandbox helper.
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	dir, err := os.MkdirTemp("", "outpost-cli")
	if err != nil {
		panic(err)
	}
	outpostBin = filepath.Join(dir, "outpost")
	if out, err := exec.Command("go", "build", "-o", outpostBin, ".").CombinedOutput(); err != nil {
		panic(string(out))
	}
	code := m.Run()
	wine.Cleanup()
	os.RemoveAll(dir)
	os.Exit(code)
}

func TestDemoRunsACommandThroughTheExecutor(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"demo"}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	for _, want := range []string{"relay     outpost://127.0.0.1:", "through the relay (Noise IK end to end)", `stdout: "hello from Linux`, `stderr: "to stderr\n"`, "exit code 3", "tick 3", "timed out=true exit=124", "demo done"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("demo output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestUnknownCommandsAndBadFlagsExitTwo(t *testing.T) {
	for _, args := range [][]string{{}, {"nope"}, {"executor"}, {"executor", "nope"}, {"executor", "serve", "--listen", "ws://localhost:1"}, {"executor", "serve", "--log-level", "loud"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 2 {
			t.Errorf("%v: exit %d, want 2", args, code)
		}
		if errb.Len() == 0 {
			t.Errorf("%v: no message on stderr", args)
		}
	}
}

func TestListenURLErrorIsExplicit(t *testing.T) {
	var out, errb bytes.Buffer
	run([]string{"executor", "serve", "--listen", "http://x"}, &out, &errb)
	if !strings.Contains(errb.String(), "unsupported --listen URL `http://x`; expected `ws://IP:PORT`, `stdio`, `tcp://HOST:PORT` or `unix:///path`") {
		t.Fatalf("stderr %q", errb.String())
	}
}

func TestEmptyConnectionTokenIsRefused(t *testing.T) {
	cmd := exec.Command(outpostBin, "executor", "serve")
	cmd.Env = append(os.Environ(), "OUTPOST_CONNECTION_TOKEN=")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "OUTPOST_CONNECTION_TOKEN is set but empty") {
		t.Fatalf("err %v output %q", err, out)
	}
}

func TestServeShutsDownOnSIGTERMTellingClientsHowTheirProcessesEnded(t *testing.T) {
	cmd := exec.Command(outpostBin, "executor", "serve", "--listen", "ws://127.0.0.1:0")
	cmd.Env = append(os.Environ(), "OUTPOST_CONNECTION_TOKEN=tok")
	stdout, _ := cmd.StdoutPipe()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	url := strings.TrimSpace(line)
	if !strings.HasPrefix(url, "ws://127.0.0.1:") {
		t.Fatalf("first stdout line %q", line)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, url, client.Config{}); err == nil {
		t.Fatal("connected without the token")
	}
	s, err := client.Dial(ctx, url, client.Config{Token: "tok"})
	if err != nil {
		t.Fatal(err)
	}
	p, err := s.Start(ctx, protocol.ExecParams{Argv: []string{"sh", "-c", "echo $$; exec sleep 60"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		t.Fatal(err)
	}
	ev := <-p.Events()
	pid := strings.TrimSpace(string(ev.Data))
	cmd.Process.Signal(syscall.SIGTERM)
	// The client is told how its process ended before the executor goes.
	var exited *client.Event
	for ev := range p.Events() {
		if ev.Kind == client.EventExited {
			exited = &ev
		}
	}
	if exited == nil || exited.Signal != int32(syscall.SIGTERM) {
		t.Fatalf("exit event %+v (err %v); stderr %s", exited, p.Err(), stderr.String())
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve exited with %v; stderr %s", err, stderr.String())
		}
	case <-ctx.Done():
		t.Fatal("serve did not exit on SIGTERM")
	}
	if _, err := os.Stat("/proc/" + pid); err == nil {
		t.Fatalf("child %s outlived the executor", pid)
	}
}

func TestServeStdio(t *testing.T) {
	cmd := exec.Command(outpostBin, "executor", "serve", "--listen", "stdio")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	stdin.Write([]byte(`{"id":1,"method":"initialize","params":{"clientName":"cli-test"}}` + "\n"))
	var m map[string]any
	if err := json.NewDecoder(stdout).Decode(&m); err != nil {
		t.Fatal(err)
	}
	if m["result"].(map[string]any)["sessionId"] == nil {
		t.Fatalf("%v", m)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("stdio serve exit: %v", err)
	}
}

func startServe(t *testing.T, args ...string) (url string, stop func() error) {
	t.Helper()
	cmd := exec.Command(outpostBin, append([]string{"executor", "serve"}, args...)...)
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
	return strings.TrimSpace(line), func() error {
		cmd.Process.Signal(syscall.SIGTERM)
		return cmd.Wait()
	}
}

func TestServeTCPPersistsItsKeyAndPrintsTheFingerprint(t *testing.T) {
	state := t.TempDir()
	url, stop := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", state)
	base, fp, ok := strings.Cut(url, "#")
	if !ok || !strings.HasPrefix(base, "tcp://127.0.0.1:") || len(fp) != 43 {
		t.Fatalf("printed %q, want tcp://HOST:PORT#<fingerprint>", url)
	}
	fi, err := os.Stat(filepath.Join(state, "executor.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file: %v %v", fi, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	env, err := client.Dial(ctx, url, client.Config{KeyFile: filepath.Join(t.TempDir(), "client.key")})
	if err != nil {
		t.Fatal(err)
	}
	out, err := client.Command(env, "echo", "over tcp").Output()
	if err != nil || string(out) != "over tcp\n" {
		t.Fatalf("%q %v", out, err)
	}
	env.Close()
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	url2, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", state)
	if _, fp2, _ := strings.Cut(url2, "#"); fp2 != fp {
		t.Fatalf("fingerprint changed across restarts: %s then %s", fp, fp2)
	}
}

func TestServeRefusesClientsOutsideTheAllowList(t *testing.T) {
	dir := t.TempDir()
	allowed, _ := identity.Generate()
	stranger, _ := identity.Generate()
	list := filepath.Join(dir, "authorized_clients")
	os.WriteFile(list, []byte("# ops\n"+allowed.PublicKey().Fingerprint()+" alice\n"), 0o600)
	url, _ := startServe(t, "--listen", "unix://"+filepath.Join(dir, "exec.sock"), "--state-dir", dir, "--authorized-clients", list)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := client.Dial(ctx, url, client.Config{Key: stranger}); err == nil || !strings.Contains(err.Error(), "not authorised") {
		t.Fatalf("stranger: %v", err)
	}
	env, err := client.Dial(ctx, url, client.Config{Key: allowed})
	if err != nil {
		t.Fatal(err)
	}
	env.Close()
}

func TestDoctorReportsWhatIsEnforced(t *testing.T) {
	var out, errb bytes.Buffer
	code := run([]string{"executor", "doctor", "--sandbox", "workspace-write"}, &out, &errb)
	if !strings.Contains(out.String(), "landlock: ABI") || !strings.Contains(out.String(), "policy workspace-write") {
		t.Fatalf("doctor output:\n%s", out.String())
	}
	enforceable := strings.Contains(out.String(), "): enforceable")
	if (code == 0) != enforceable {
		t.Fatalf("exit %d but output says enforceable=%v", code, enforceable)
	}
	// A limit is checked when asked for, and the exit code agrees.
	out.Reset()
	code = run([]string{"executor", "doctor", "--memory-max", "1G"}, &out, &errb)
	limitOK := strings.Contains(out.String(), "--memory-max: enforceable")
	if !limitOK && !strings.Contains(out.String(), "--memory-max: NOT enforceable: ") || (code == 0) != (enforceable && limitOK) {
		t.Fatalf("doctor --memory-max: exit %d\n%s", code, out.String())
	}
	if code := run([]string{"executor", "doctor", "--sandbox", "bogus"}, &out, &errb); code != 2 {
		t.Fatalf("bad mode: exit %d", code)
	}
}

func TestRlimitFlagsReachSandboxedCommands(t *testing.T) {
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
		testdeps.Missing(t, "sandbox", "no sandbox here: %v", err)
	}
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir(), "--rlimit-nofile", "77", "--rlimit-fsize", "1M")
	out, stderr, code := outpostExec(t, "", "--target", url, "--sandbox", "workspace-write", "--", "sh", "-c", "ulimit -n; ulimit -f; ulimit -c")
	// ulimit -f counts 512-byte blocks: 1 MiB is 2048.
	if code != 0 || out != "77\n2048\n0\n" {
		t.Fatalf("exit %d, limits %q (want 77, 2048, 0); stderr %s", code, out, stderr)
	}
}

func outpostExec(t *testing.T, stdin string, args ...string) (string, string, int) {
	t.Helper()
	cmd := exec.Command(outpostBin, append([]string{"exec"}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), code
}

func TestExecExitCodes(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
	}{
		{[]string{"--", "true"}, 0},
		{[]string{"--", "sh", "-c", "exit 7"}, 7},
		{[]string{"--timeout", "200ms", "--", "sleep", "10"}, 124},
		{[]string{"--", "/nonexistent/cmd"}, 127},
		{[]string{"--target", "tcp://127.0.0.1:1", "--", "true"}, 121},
		{[]string{"--", "sh", "-c", "kill -9 $$"}, 137},
	} {
		if _, stderr, code := outpostExec(t, "", c.args...); code != c.code {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.code, stderr)
		}
	}
}

func TestExecForwardsStdinAndEOF(t *testing.T) {
	out, _, code := outpostExec(t, "hi\nthere\n", "--", "cat")
	if code != 0 || out != "hi\nthere\n" {
		t.Fatalf("%q %d", out, code)
	}
}

func TestExecForwardsSIGINTAndExits130(t *testing.T) {
	cmd := exec.Command(outpostBin, "exec", "--", "sh", "-c", "echo ready; exec sleep 30")
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, _ := bufio.NewReader(stdout).ReadString('\n')
	if line != "ready\n" {
		t.Fatalf("%q", line)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130", err)
	}
}

func TestExecJSONEventsParse(t *testing.T) {
	out, _, code := outpostExec(t, "", "--json", "--", "sh", "-c", "echo a; echo b >&2; exit 3")
	if code != 3 {
		t.Fatalf("exit %d", code)
	}
	var types []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		types = append(types, m["type"].(string))
		if m["type"] == "exit" && m["exitCode"].(float64) != 3 {
			t.Fatalf("%v", m)
		}
	}
	if types[0] != "start" || types[len(types)-1] != "exit" || len(types) != 4 {
		t.Fatalf("events %v", types)
	}
}

func TestExecTTYSessionThroughAPty(t *testing.T) {
	cmd := exec.Command(outpostBin, "exec", "--tty", "--", "sh", "-c", "stty size; read x; echo got:$x")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 33, Cols: 99})
	if err != nil {
		t.Fatal(err)
	}
	defer ptmx.Close()
	var buf bytes.Buffer
	readUntil := func(want string) {
		deadline := time.Now().Add(20 * time.Second)
		tmp := make([]byte, 1024)
		for !strings.Contains(buf.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q in %q", want, buf.String())
			}
			ptmx.SetReadDeadline(time.Now().Add(time.Second))
			n, _ := ptmx.Read(tmp)
			buf.Write(tmp[:n])
		}
	}
	readUntil("33 99") // the local window size reached the remote pty
	ptmx.Write([]byte("hello\r"))
	readUntil("got:hello")
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exit: %v", err)
	}
}

func TestRelayJoinTokenAndExecAsSeparateProcesses(t *testing.T) {
	rs := startRelayStack(t)
	relayURL, env := rs.URL, rs.Env
	clientTok := rs.token("--client", "--executors", "e-*")
	rs.join("e-1")
	deadline := time.Now().Add(20 * time.Second)
	for {
		cmd := exec.Command(outpostBin, "exec", "--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "sh", "-c", "echo via-relay; exit 4")
		cmd.Env = env
		out, err := cmd.Output()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 4 && string(out) == "via-relay\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec through the relay: %q %v", out, err)
		}
		time.Sleep(50 * time.Millisecond) // the executor is still joining
	}
	cmd := exec.Command(outpostBin, "executors", "ls", "--relay", relayURL, "--token", clientTok)
	cmd.Env = env
	if out, err := cmd.Output(); err != nil || !strings.Contains(string(out), "e-1") {
		t.Fatalf("executors ls: %q %v", out, err)
	}
}

func TestRelaySIGTERMLetsOpenCommandsFinishThenExits(t *testing.T) {
	dir := t.TempDir()
	relayCmd := exec.Command(outpostBin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "relay"), "--drain-timeout", "20s")
	stdout, _ := relayCmd.StdoutPipe()
	var relayLog bytes.Buffer
	relayCmd.Stderr = &relayLog
	if err := relayCmd.Start(); err != nil {
		t.Fatal(err)
	}
	relayDone := make(chan error, 1)
	go func() { relayDone <- relayCmd.Wait() }()
	defer relayCmd.Process.Kill()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("relay printed %q (%v)", line, err)
	}
	relayURL := strings.TrimSpace(line)
	token := func(args ...string) string {
		out, err := exec.Command(outpostBin, append([]string{"token", "create", "--state-dir", filepath.Join(dir, "relay")}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	joinTok, clientTok := token("--join"), token("--client")
	join := exec.Command(outpostBin, "executor", "join", "--relay", relayURL, "--token", joinTok, "--id", "e-1", "--state-dir", filepath.Join(dir, "exec"))
	var joinLog syncBuffer
	join.Stderr = &joinLog
	if err := join.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { join.Process.Signal(syscall.SIGTERM); join.Wait() }()
	// A command that is running when the relay is told to stop.
	cmd := exec.Command(outpostBin, "exec", "--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "sh", "-c", "echo started; read x; echo finished")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
	stdin, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(joinLog.String(), "joined the relay") {
		if time.Now().After(deadline) {
			t.Fatalf("executor did not join: %s", joinLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(out)
	if l, err := r.ReadString('\n'); l != "started\n" {
		t.Fatalf("%q %v", l, err)
	}
	relayCmd.Process.Signal(syscall.SIGTERM)
	for !strings.Contains(joinLog.String(), "relay asked to reconnect") {
		if time.Now().After(deadline) {
			t.Fatalf("the executor was not told to reconnect: %s", joinLog.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
	select {
	case err := <-relayDone:
		t.Fatalf("the relay exited with a command open: %v\n%s", err, relayLog.String())
	default:
	}
	io.WriteString(stdin, "go\n")
	stdin.Close()
	if l, err := r.ReadString('\n'); l != "finished\n" {
		t.Fatalf("after SIGTERM: %q %v", l, err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("exec: %v", err)
	}
	select {
	case err := <-relayDone:
		if err != nil || !strings.Contains(relayLog.String(), "relay drained") || !strings.Contains(relayLog.String(), "relay shutting down") {
			t.Fatalf("relay exit %v\n%s", err, relayLog.String())
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("the relay did not exit after its last stream ended\n%s", relayLog.String())
	}
}

// syncBuffer is a bytes.Buffer safe for a writer goroutine and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestExecAndExecutorExportSpansOfOneTraceOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var bodies [][]byte
	collector := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			bodies = append(bodies, b)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer collector.Close()
	otel := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + collector.URL, "OTEL_BSP_SCHEDULE_DELAY=50"}
	dir := t.TempDir()
	serve := exec.Command(outpostBin, "executor", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "exec"))
	serve.Env = append(os.Environ(), otel...)
	stdout, _ := serve.StdoutPipe()
	if err := serve.Start(); err != nil {
		t.Fatal(err)
	}
	defer serve.Process.Kill()
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	const traceID = "0af7651916cd43dd8448eb211c80319c"
	cmd := exec.Command(outpostBin, "exec", "--target", strings.TrimSpace(url), "--", "sh", "-c", "exit 0")
	cmd.Env = append(os.Environ(), append(otel, "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"), "TRACEPARENT=00-"+traceID+"-b7ad6b7169203331-01")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("exec: %v\n%s", err, out)
	}
	serve.Process.Signal(syscall.SIGTERM) // flushes its spans
	serve.Wait()
	id, _ := hex.DecodeString(traceID)
	mu.Lock()
	defer mu.Unlock()
	found := map[string][]string{} // service → span names in the trace
	for _, b := range bodies {
		var req coltracepb.ExportTraceServiceRequest
		if err := proto.Unmarshal(b, &req); err != nil {
			t.Fatalf("export body: %v", err)
		}
		for _, rs := range req.ResourceSpans {
			svc := ""
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					svc = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, sp := range ss.Spans {
					if bytes.Equal(sp.TraceId, id) {
						found[svc] = append(found[svc], sp.Name)
					}
				}
			}
		}
	}
	t.Logf("spans in trace %s: %v", traceID, found)
	if len(found["outpost-exec"]) < 3 || !slices.Contains(found["outpost-executor"], "process") || !slices.Contains(found["outpost-executor"], "process/start") {
		t.Fatalf("spans of trace %s from exec and executor: %v (%d exports)", traceID, found, len(bodies))
	}
}

func TestCpCopiesFilesAndTreesBothWaysCheckingDigests(t *testing.T) {
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	dir := t.TempDir()
	cfgHome := filepath.Join(dir, "cfg")
	cp := func(args ...string) (string, error) {
		cmd := exec.Command(outpostBin, append([]string{"cp", "--target", url}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cfgHome)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	// A tree with an executable, a nested file and a 3 MiB blob.
	src := filepath.Join(dir, "src")
	os.MkdirAll(filepath.Join(src, "nested"), 0o755)
	os.WriteFile(filepath.Join(src, "run.sh"), []byte("#!/bin/sh\necho hi\n"), 0o755)
	os.WriteFile(filepath.Join(src, "nested", "note"), []byte("note"), 0o600)
	blob := make([]byte, 3<<20+7)
	for i := range blob {
		blob[i] = byte(i * 7)
	}
	os.WriteFile(filepath.Join(src, "blob"), blob, 0o644)

	remote := filepath.Join(dir, "remote")
	os.MkdirAll(remote, 0o755)
	if out, err := cp(filepath.Join(src, "blob"), ":"+remote+"/"); err != nil {
		t.Fatalf("upload a file: %v\n%s", err, out)
	}
	if b, _ := os.ReadFile(filepath.Join(remote, "blob")); !bytes.Equal(b, blob) {
		t.Fatal("uploaded file differs")
	}
	if out, err := cp(src, ":"+remote); err == nil || !strings.Contains(out, "is a directory (use -r)") {
		t.Fatalf("a directory without -r: %v %s", err, out)
	}
	if out, err := cp("-r", src, ":"+filepath.Join(remote, "tree")); err != nil {
		t.Fatalf("upload a tree: %v\n%s", err, out)
	}
	back := filepath.Join(dir, "back")
	if out, err := cp("-r", ":"+filepath.Join(remote, "tree"), back); err != nil {
		t.Fatalf("download a tree: %v\n%s", err, out)
	}
	for name, want := range map[string]os.FileMode{"run.sh": 0o755, "nested/note": 0o600, "blob": 0o644} {
		a, _ := os.ReadFile(filepath.Join(src, name))
		b, err := os.ReadFile(filepath.Join(back, name))
		fi, _ := os.Stat(filepath.Join(back, name))
		if err != nil || !bytes.Equal(a, b) || fi.Mode().Perm() != want {
			t.Fatalf("%s came back as %d bytes, mode %v (%v)", name, len(b), fi.Mode(), err)
		}
	}
	if out, err := cp(":"+filepath.Join(remote, "missing"), back); err == nil || !strings.Contains(out, "missing") {
		t.Fatalf("a missing remote file: %v %s", err, out)
	}
	if out, err := cp("--sandbox", "read-only", filepath.Join(src, "blob"), ":"+filepath.Join(remote, "denied")); err == nil || !strings.Contains(out, "access denied") {
		t.Fatalf("an upload under read-only: %v %s", err, out)
	}
	if _, err := os.Stat(filepath.Join(remote, "denied")); err == nil {
		t.Fatal("read-only upload wrote the file")
	}
}

func TestCpOperandSyntax(t *testing.T) {
	for in, want := range map[string]cpOperand{
		"build-1:/srv/x": {remote: true, executor: "build-1", path: "/srv/x"},
		":/srv/x":        {remote: true, path: "/srv/x"},
		"/local/a:b":     {path: "/local/a:b"},
		"./x:y":          {path: "./x:y"},
		"plain":          {path: "plain"},
	} {
		if got := parseOperand(in); got != want {
			t.Errorf("%q: %+v, want %+v", in, got, want)
		}
	}
}

func TestCpBetweenExecutorsAndWithinOne(t *testing.T) {
	dir := t.TempDir()
	relayCmd := exec.Command(outpostBin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "relay"))
	stdout, _ := relayCmd.StdoutPipe()
	if err := relayCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { relayCmd.Process.Signal(syscall.SIGTERM); relayCmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	relayURL := strings.TrimSpace(line)
	token := func(args ...string) string {
		out, err := exec.Command(outpostBin, append([]string{"token", "create", "--state-dir", filepath.Join(dir, "relay")}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	joinTok, clientTok := token("--join"), token("--client")
	for _, id := range []string{"a", "b"} {
		j := exec.Command(outpostBin, "executor", "join", "--relay", relayURL, "--token", joinTok, "--id", id, "--state-dir", filepath.Join(dir, "exec-"+id))
		if err := j.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { j.Process.Signal(syscall.SIGTERM); j.Wait() }()
	}
	cp := func(args ...string) (string, error) {
		cmd := exec.Command(outpostBin, append([]string{"cp", "-q", "--relay", relayURL, "--token", clientTok}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	src := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(src, "d"), 0o755)
	os.WriteFile(filepath.Join(src, "d", "f"), bytes.Repeat([]byte("outpost "), 300000), 0o640)
	deadline := time.Now().Add(20 * time.Second)
	for {
		// Both executors must have joined: a copy between them needs both.
		out, err := cp("-r", "a:"+src, "b:"+filepath.Join(dir, "via-client"))
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a → b: %v\n%s", err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := cp("-r", "b:"+filepath.Join(dir, "via-client"), "b:"+filepath.Join(dir, "within")); err != nil {
		t.Fatalf("b → b: %v\n%s", err, out)
	}
	want, _ := os.ReadFile(filepath.Join(src, "d", "f"))
	for _, copy := range []string{"via-client", "within"} {
		got, err := os.ReadFile(filepath.Join(dir, copy, "d", "f"))
		fi, _ := os.Stat(filepath.Join(dir, copy, "d", "f"))
		if err != nil || !bytes.Equal(got, want) || fi.Mode().Perm() != 0o640 {
			t.Fatalf("%s: %d bytes, %v", copy, len(got), err)
		}
	}
	if out, err := cp(filepath.Join(dir, "x"), filepath.Join(dir, "y")); err == nil || !strings.Contains(out, "must be EXECUTOR:PATH") {
		t.Fatalf("two local paths: %v %s", err, out)
	}
}
