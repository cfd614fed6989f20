package main

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/wine"
)

// The Windows client under Wine: outpost.exe (windows/amd64, built from
// this checkout) runs exec and cp against a Linux relay and executor on
// loopback, as a user on a Windows laptop would; its key file is judged
// by its ACL (identity/acl_windows.go); Ctrl-C reaches the remote command.
// The bridge under Wine, with codex pointed at it, is in conformance
// (TestCodexCLIThroughAWindowsBridge).

var (
	windowsExeOnce sync.Once
	windowsExe     string
	windowsExeErr  error
)

// windowsOutpost is outpost.exe, built once per test process beside the
// Linux binary.
func windowsOutpost(t *testing.T) (*wine.Prefix, string) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds outpost.exe and a Wine prefix")
	}
	p := wine.Shared(t)
	windowsExeOnce.Do(func() {
		windowsExe = filepath.Join(filepath.Dir(outpostBin), "outpost.exe")
		cmd := exec.Command("go", "build", "-o", windowsExe, ".")
		cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			windowsExeErr = errors.New(string(out))
		}
	})
	if windowsExeErr != nil {
		t.Fatalf("go build outpost.exe: %v", windowsExeErr)
	}
	return p, windowsExe
}

// wineClient is one Windows user's outpost.exe: its configuration (key,
// pins) in a directory of its own, given as XDG_CONFIG_HOME in Windows
// form, which outpost honours on Windows as everywhere.
type wineClient struct {
	t      *testing.T
	prefix *wine.Prefix
	exe    string
	config string // the Linux path of XDG_CONFIG_HOME
}

func newWineClient(t *testing.T) *wineClient {
	p, exe := windowsOutpost(t)
	return &wineClient{t: t, prefix: p, exe: exe, config: t.TempDir()}
}

func (c *wineClient) command(args ...string) *exec.Cmd {
	cmd := c.prefix.Command(c.exe, args...)
	cmd.Env = append(cmd.Env, "XDG_CONFIG_HOME="+wine.Path(c.config), "XDG_STATE_HOME="+wine.Path(c.config))
	return cmd
}

// run runs outpost.exe with args and stdin, returning stdout, stderr and
// its exit status.
func (c *wineClient) run(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	cmd := c.command(args...)
	cmd.Stdin = strings.NewReader(stdin)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		c.t.Fatalf("wine outpost.exe %v: %v", args, err)
	}
	return out.String(), errb.String(), cmd.ProcessState.ExitCode()
}

// execUntilJoined retries outpost exec while the executor is still
// joining (exit 123, offline), then returns the first other result.
func (c *wineClient) execUntilJoined(stdin string, args ...string) (string, string, int) {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, errb, code := c.run(stdin, args...)
		if (code != exitOffline && code != exitUnknown) || time.Now().After(deadline) {
			return out, errb, code
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestWindowsClientExecAndCpThroughALinuxRelay(t *testing.T) {
	c := newWineClient(t)
	rs := startRelayStack(t)
	tok := rs.token("--client", "--executors", "linux-*")
	rs.join("linux-1")
	remote := []string{"--relay", rs.URL, "--executor", "linux-1", "--token", tok}

	// exec: stdin in, stdout and stderr apart, the exit status out (after
	// the note that the executor's key was pinned on first contact).
	out, errb, code := c.execUntilJoined("from windows\n", append(append([]string{"exec"}, remote...),
		"--", "sh", "-c", "cat; uname -s; echo to-stderr >&2; exit 7")...)
	if code != 7 || out != "from windows\nLinux\n" || !strings.Contains(errb, "\nto-stderr\n") || !strings.Contains(errb, "first contact") {
		t.Fatalf("exec: exit %d, stdout %q, stderr %q", code, out, errb)
	}
	// The client's key was made in its configuration directory (Wine's
	// view of its ACL is checked by identity's TestWindowsUnderWine).
	if _, err := os.Stat(filepath.Join(c.config, "outpost", "client.key")); err != nil {
		t.Fatalf("the client key: %v", err)
	}

	// cp: a tree of Windows paths up to the executor and back, by drive
	// letter; contents, nesting and an executable bit's absence survive.
	local := t.TempDir()
	src := filepath.Join(local, "src")
	if err := os.MkdirAll(filepath.Join(src, "sub", "deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"a.txt": "alpha\r\n", filepath.Join("sub", "b.bin"): strings.Repeat("\x00\xffbeta", 70000), filepath.Join("sub", "deeper", "c"): ""}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(src, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	remoteDir := "/tmp/" + filepath.Base(local) + "-up"
	t.Cleanup(func() { os.RemoveAll(remoteDir) }) // the executor is on this machine
	cp := func(from, to string) {
		t.Helper()
		if out, errb, code := c.run("", "cp", "-q", "-r", "--relay", rs.URL, "--token", tok, from, to); code != 0 {
			t.Fatalf("cp %s %s: exit %d: %s%s", from, to, code, out, errb)
		}
	}
	cp(wine.Path(src), "linux-1:"+remoteDir)
	back := filepath.Join(local, "back")
	cp("linux-1:"+remoteDir, wine.Path(back))
	for name, data := range files {
		got, err := os.ReadFile(filepath.Join(remoteDir, name))
		if err != nil || string(got) != data {
			t.Errorf("on the executor, %s: %d bytes (want %d), %v", name, len(got), len(data), err)
		}
		got, err = os.ReadFile(filepath.Join(back, name))
		if err != nil || string(got) != data {
			t.Errorf("back on Windows, %s: %d bytes (want %d), %v", name, len(got), len(data), err)
		}
	}
}

// A client key file others may read is refused, as chmod 644 is on Unix:
// Wine derives the file's ACL from its mode (Everyone may read), and
// outpost.exe refuses to use it and says how to mend it; nothing is sent.
func TestWindowsClientRefusesAKeyFileOthersMayRead(t *testing.T) {
	c := newWineClient(t)
	rs := startRelayStack(t)
	tok := rs.token("--client")
	rs.join("linux-1")
	dir := filepath.Join(c.config, "outpost")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// A well-formed key, but world-readable.
	if _, errb, code := c.run("", "exec", "--relay", rs.URL, "--executor", "nobody", "--token", tok, "--", "true"); code == 0 {
		t.Fatalf("exec to a missing executor succeeded: %s", errb)
	}
	key := filepath.Join(dir, "client.key")
	data, err := os.ReadFile(key)
	if err != nil {
		t.Fatalf("the first run made no key: %v", err)
	}
	os.Remove(key)
	if err := os.WriteFile(key, data, 0o644); err != nil {
		t.Fatal(err)
	}
	out, errb, code := c.execUntilJoined("", "exec", "--relay", rs.URL, "--executor", "linux-1", "--token", tok, "--", "echo", "ran")
	if code == 0 || strings.Contains(out, "ran") {
		t.Fatalf("exec with a world-readable key: exit %d, stdout %q", code, out)
	}
	for _, want := range []string{"client.key", "Everyone", "icacls"} {
		if !strings.Contains(errb, want) {
			t.Errorf("the refusal does not name %q: %s", want, errb)
		}
	}
	// Mended (mode 0600: only the owner in the derived ACL), it runs.
	if err := os.Chmod(key, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, errb, code := c.execUntilJoined("", "exec", "--relay", rs.URL, "--executor", "linux-1", "--token", tok, "--", "echo", "ran"); code != 0 || out != "ran\n" {
		t.Fatalf("exec with the key mended: exit %d, %q %q", code, out, errb)
	}
}

// Ctrl-C at the Windows console (Wine turns the SIGINT it gets into the
// console's CTRL_C_EVENT) interrupts the remote command: its trap runs and
// its exit status comes back.
func TestWindowsClientCtrlCInterruptsTheRemoteCommand(t *testing.T) {
	c := newWineClient(t)
	rs := startRelayStack(t)
	tok := rs.token("--client")
	rs.join("linux-1")
	// Joined and reachable first, so that the interrupt below meets a
	// running command.
	if _, errb, code := c.execUntilJoined("", "exec", "--relay", rs.URL, "--executor", "linux-1", "--token", tok, "--", "true"); code != 0 {
		t.Fatalf("exec true: exit %d: %s", code, errb)
	}
	cmd := c.command("exec", "--relay", rs.URL, "--executor", "linux-1", "--token", tok, "--",
		"sh", "-c", `trap 'echo interrupted; exit 42' INT; echo ready; while :; do sleep 0.1; done`)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	r := bufio.NewReader(stdout)
	if line, err := r.ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("first line %q (%v); stderr %s", line, err, errb.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	rest := make(chan string, 1)
	go func() {
		var b strings.Builder
		bufio.NewReader(r).WriteTo(&b)
		rest <- b.String()
	}()
	select {
	case got := <-rest:
		cmd.Wait()
		if got != "interrupted\n" || cmd.ProcessState.ExitCode() != 42 {
			t.Fatalf("after Ctrl-C: stdout %q, exit %d; stderr %s", got, cmd.ProcessState.ExitCode(), errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("Ctrl-C did not end the remote command; stderr %s", errb.String())
	}
}

// The relay on a Windows workstation: outpost.exe relay serve (its bbolt
// store on a Windows path) under Wine, tokens made by outpost.exe token
// create beside it, a Linux executor joined and a Linux client running a
// command through it.
func TestWindowsRelayServesLinuxExecutorsAndClients(t *testing.T) {
	c := newWineClient(t)
	state := filepath.Join(t.TempDir(), "relay")
	relay := c.command("relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", wine.Path(state))
	stdout, err := relay.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var relayErr bytes.Buffer
	relay.Stderr = &relayErr
	if err := relay.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { relay.Process.Kill(); relay.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "outpost://127.0.0.1:") {
		t.Fatalf("the Windows relay printed %q (%v); stderr %s", line, err, relayErr.String())
	}
	url := strings.TrimSpace(line)
	token := func(args ...string) string {
		t.Helper()
		out, errb, code := c.run("", append([]string{"token", "create", "--state-dir", wine.Path(state)}, args...)...)
		if code != 0 {
			t.Fatalf("outpost.exe token create %v: exit %d: %s", args, code, errb)
		}
		return strings.TrimSpace(out)
	}
	joinTok, clientTok := token("--join", "--uses", "1"), token("--client")
	join := exec.Command(outpostBin, "executor", "join", "--relay", url, "--token", joinTok, "--id", "linux-1", "--state-dir", filepath.Join(t.TempDir(), "exec"))
	if err := join.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { join.Process.Signal(syscall.SIGTERM); join.Wait() })
	env := append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	deadline := time.Now().Add(30 * time.Second)
	for {
		cmd := exec.Command(outpostBin, "exec", "--relay", url, "--executor", "linux-1", "--token", clientTok, "--", "echo", "via a Windows relay")
		cmd.Env = env
		out, err := cmd.Output()
		if err == nil && string(out) == "via a Windows relay\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec through the Windows relay: %q %v; relay stderr %s", out, err, relayErr.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
