package main

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// relayStack is a relay run as its own process (outpost relay serve), for
// tests that drive outpost as separate processes through it; Env gives a
// client its own config directory (pins, client key).
type relayStack struct {
	t     *testing.T
	dir   string
	state string // the relay's --state-dir
	URL   string // as the relay printed it
	Env   []string
}

func startRelayStack(t *testing.T) *relayStack {
	t.Helper()
	dir := t.TempDir()
	s := &relayStack{t: t, dir: dir, state: filepath.Join(dir, "relay"), Env: append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))}
	cmd := exec.Command(outpostBin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", s.state)
	stdout, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "outpost://127.0.0.1:") {
		t.Fatalf("relay printed %q (%v)", line, err)
	}
	s.URL = strings.TrimSpace(line)
	return s
}

// token runs outpost token create with args and returns the token.
func (s *relayStack) token(args ...string) string {
	s.t.Helper()
	out, err := exec.Command(outpostBin, append([]string{"token", "create", "--state-dir", s.state}, args...)...).Output()
	if err != nil {
		s.t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// join starts outpost executor join for id with a one-use join token; it
// is stopped (SIGTERM) at the end of the test unless the caller stops it.
func (s *relayStack) join(id string) *exec.Cmd {
	s.t.Helper()
	cmd := exec.Command(outpostBin, "executor", "join", "--relay", s.URL, "--token", s.token("--join", "--uses", "1"), "--id", id, "--state-dir", filepath.Join(s.dir, "exec-"+id))
	if err := cmd.Start(); err != nil {
		s.t.Fatal(err)
	}
	s.t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
		}
	})
	return cmd
}
