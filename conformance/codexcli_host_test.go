package conformance

// The executor side of the codex CLI matrix: what the machine that runs the
// commands looks like to an exec-server, made to differ from the test's own
// side so that a server which reports (or uses) the CLI's side instead of
// its own is caught.
//
//   - Its login shell. codex's exec-server reports the user's login shell
//     from the password database (not $SHELL), so the executor processes
//     run in a mount namespace of their own where /etc/passwd is a copy
//     giving this user another shell, and with SHELL set to it too. Where
//     no mount namespace can be had (no CAP_SYS_ADMIN), only SHELL is set.
//   - Its CODEX_HOME, with a config.toml naming an MCP server: codex
//     0.158+ reads the executor's [mcp_servers] with environmentConfig/read
//     and keeps only the HTTP ones (those with a url), so the server is a
//     streamable-HTTP MCP server on loopback (mcpMarker).

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
)

// hostShell is the executor side's login shell.
type hostShell struct {
	path string // differs from the test's own $SHELL and login shell
	own  string // the test's own login shell
	// passwd is a copy of /etc/passwd giving this user path as login
	// shell, bind-mounted over /etc/passwd for the executor processes; ""
	// when this machine cannot give them a mount namespace.
	passwd string
}

// newHostShell picks the executor's shell and checks that a mount
// namespace can give it to the executor processes.
func newHostShell(t *testing.T) hostShell {
	t.Helper()
	uid := strconv.Itoa(os.Getuid())
	b, err := os.ReadFile("/etc/passwd")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	mine := -1
	var own string
	for i, l := range lines {
		if f := strings.Split(l, ":"); len(f) == 7 && f[2] == uid {
			mine, own = i, f[6]
			break
		}
	}
	var s hostShell
	s.own = own
	for _, c := range []string{"/bin/sh", "/bin/dash", "/bin/bash", "/usr/bin/zsh"} {
		if _, err := os.Stat(c); err == nil && c != own && c != os.Getenv("SHELL") {
			s.path = c
			break
		}
	}
	if s.path == "" {
		t.Fatalf("no shell differs from the test's own (%s, $SHELL %s)", own, os.Getenv("SHELL"))
	}
	if mine < 0 {
		t.Logf("uid %s is not in /etc/passwd: the executor's login shell is only $SHELL", uid)
		return s
	}
	f := strings.Split(lines[mine], ":")
	f[6] = s.path
	lines[mine] = strings.Join(f, ":")
	copyPath := filepath.Join(t.TempDir(), "passwd")
	if err := os.WriteFile(copyPath, []byte(strings.Join(lines, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	probe := exec.Command("unshare", inMountNS(copyPath, "cat", "/etc/passwd")...)
	out, err := probe.CombinedOutput()
	if err != nil || !strings.Contains(string(out), lines[mine]) {
		t.Logf("no mount namespace for the executor (%v: %s): its login shell is only $SHELL", err, strings.TrimSpace(string(out)))
		return s
	}
	s.passwd = copyPath
	return s
}

// inMountNS is unshare's argv to run argv in a private mount namespace
// with passwd over /etc/passwd. unshare and sh exec in turn, so argv keeps
// the pid unshare started with.
func inMountNS(passwd string, argv ...string) []string {
	return append([]string{"-m", "--propagation", "private", "--", "sh", "-c", `mount --bind "$0" /etc/passwd && exec "$@"`, passwd}, argv...)
}

// executorHost is the executor side of one exec-server.
type executorHost struct {
	shell hostShell
	home  string   // the exec-server's CODEX_HOME
	env   []string // for every executor process
	// mcp is the MCP server home's config.toml names.
	mcp *mcpMarker
}

func newExecutorHost(t *testing.T, shell hostShell) *executorHost {
	t.Helper()
	// Not under /tmp: codex's exec-server refuses to make its helper
	// aliases (codex-linux-sandbox, which 0.145 and 0.158 sandbox with)
	// in a CODEX_HOME below the temporary directory.
	home, err := os.MkdirTemp("/var/tmp", "outpost-codexcli-home-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(home) })
	h := &executorHost{shell: shell, home: home, mcp: startMCPMarker(t)}
	h.env = []string{"SHELL=" + shell.path, "CODEX_HOME=" + h.home}
	cfg := fmt.Sprintf("[mcp_servers.%s]\nurl = %q\nstartup_timeout_sec = 20\n", h.mcp.tag, h.mcp.url)
	if err := os.WriteFile(filepath.Join(h.home, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return h
}

// argv runs bin with args on the executor side.
func (h *executorHost) argv(bin string, args ...string) []string {
	if h.shell.passwd == "" {
		return append([]string{bin}, args...)
	}
	return append([]string{"unshare"}, inMountNS(h.shell.passwd, append([]string{bin}, args...)...)...)
}

// startHostBridgeChain is peers.StartBridgeChain with the joined executor
// on host's side: a relay (state in dir/relay), a join and a client token,
// an executor joined with id, and `outpost bridge` to it through the relay.
func startHostBridgeChain(ctx context.Context, bin, dir, id string, host *executorHost) (_ *peers.BridgeChain, err error) {
	env := []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_STATE_HOME=" + filepath.Join(dir, "state")}
	c := &peers.BridgeChain{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	relayState := filepath.Join(dir, "relay")
	if c.Relay, err = peers.Start(ctx, env, bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", relayState, "--log-level", "warn"); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	token := func(args ...string) (string, error) { return peers.TokenEnv(ctx, bin, relayState, env, args...) }
	joinTok, err := token("--join", "--uses", "1")
	if err != nil {
		return nil, err
	}
	clientTok, err := token("--client", "--executors", id)
	if err != nil {
		return nil, err
	}
	// At info level: "joined the relay" says when the bridge can reach it.
	if c.Executor, err = peers.Start(ctx, append(env, host.env...), host.argv(bin, "executor", "join", "--relay", c.Relay.URL, "--token", joinTok, "--id", id,
		"--state-dir", filepath.Join(dir, "executor"), "--log-level", "info")...); err != nil {
		return nil, fmt.Errorf("executor join: %w", err)
	}
	for !strings.Contains(c.Executor.Stderr(), "joined the relay") {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("executor %s did not join the relay: %w; stderr: %s", id, ctx.Err(), c.Executor.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if c.Bridge, err = peers.Start(ctx, env, bin, "bridge", "--relay", c.Relay.URL, "--executor", id, "--token", clientTok,
		"--listen", "ws://127.0.0.1:0", "--log-level", "warn"); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	c.URL, c.ExecutorID, c.ClientToken, c.Env = c.Bridge.URL, id, clientTok, env
	return c, nil
}
