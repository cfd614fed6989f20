//go:build e2e

// Package e2e drives outpost as users deploy it: a relay, two executors on
// networks of their own and a client, as containers with docker compose
// (e2e/docker-compose.yml; the operator's stack in deploy/ has a test of
// its own, compose_deploy_test.go). Run with `make e2e` (needs a Docker
// engine).
package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/relay"
)

const image = "outpost:e2e"

type stack struct {
	dir     string
	env     []string
	project string
}

func run(t *testing.T, dir string, env []string, name string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return out.String(), err
}

// buildImage builds the FROM-scratch image with deploy/build-image.sh
// (the static outpost binary, its sandbox helper and busybox-static) under
// tag.
func buildImage(t *testing.T, root, tag string) {
	t.Helper()
	if _, err := exec.LookPath("busybox"); err != nil {
		testdeps.Missing(t, "busybox", "busybox-static is not installed (apt-get install busybox-static)")
	}
	if out, err := run(t, root, nil, "deploy/build-image.sh", tag); err != nil {
		t.Fatalf("deploy/build-image.sh: %v\n%s", err, out)
	}
}

func setup(t *testing.T) *stack {
	t.Helper()
	if _, err := exec.LookPath("docker-compose"); err != nil {
		testdeps.Missing(t, "docker", "docker-compose is not installed")
	}
	if out, err := run(t, "", nil, "docker", "info"); err != nil {
		testdeps.Missing(t, "docker", "no Docker engine: %s", out)
	}
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	buildImage(t, root, image)
	// The relay's state, prepared on the host: its key (so the URL is
	// known in advance) and the tokens.
	state := t.TempDir()
	key, _, err := identity.LoadOrCreate(filepath.Join(state, "relay.key"))
	if err != nil {
		t.Fatal(err)
	}
	store, err := relay.OpenStore(filepath.Join(state, "relay.db"))
	if err != nil {
		t.Fatal(err)
	}
	tok := func(kind relay.TokenKind, o relay.CreateOptions) string {
		s, _, err := store.Create(kind, o)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	os.Chmod(state, 0o777)
	for _, f := range []string{"relay.key", "relay.db"} {
		os.Chmod(filepath.Join(state, f), 0o600)
	}
	project := fmt.Sprintf("outpost-e2e-%d", time.Now().UnixNano()%1e6)
	s := &stack{dir: filepath.Join(root, "e2e"), project: project, env: []string{
		"COMPOSE_PROJECT_NAME=" + project,
		"OUTPOST_RELAY_STATE=" + state,
		"OUTPOST_RELAY_URL=outpost://relay:7443#" + key.PublicKey().Fingerprint(),
		"OUTPOST_JOIN_TOKEN_1=" + tok(relay.TokenJoin, relay.CreateOptions{Uses: 1}),
		"OUTPOST_JOIN_TOKEN_2=" + tok(relay.TokenJoin, relay.CreateOptions{Uses: 1}),
		"OUTPOST_CLIENT_TOKEN=" + tok(relay.TokenClient, relay.CreateOptions{Executors: "exec*"}),
	}}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := run(t, s.dir, s.env, "docker-compose", "logs", "--no-color")
			t.Logf("compose logs:\n%s", out)
		}
		run(t, s.dir, s.env, "docker-compose", "down", "-v", "--remove-orphans")
		run(t, "", nil, "docker", "rmi", "-f", image)
	})
	if out, err := run(t, s.dir, s.env, "docker-compose", "up", "-d", "relay", "exec1", "exec2"); err != nil {
		t.Fatalf("compose up: %v\n%s", err, out)
	}
	return s
}

// exec runs "outpost exec ..." in a fresh client container and returns
// its stdout; an error carries the stderr (outpost's and compose's).
func (s *stack) exec(t *testing.T, args ...string) (string, error) {
	t.Helper()
	return s.execWith(t, nil, args...)
}

func (s *stack) execWith(t *testing.T, extra []string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cargs := []string{"run", "--rm", "-T"}
	for _, e := range extra {
		cargs = append(cargs, "-e", e)
	}
	cmd := exec.CommandContext(ctx, "docker-compose", append(append(cargs, "client", "exec"), args...)...)
	cmd.Dir = s.dir
	cmd.Env = append(os.Environ(), s.env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, stderr.String())
	}
	return stdout.String(), nil
}

func TestCommandsRunOnEachExecutorThroughTheRelay(t *testing.T) {
	s := setup(t)
	for _, id := range []string{"exec1", "exec2"} {
		var out string
		var err error
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
			out, err = s.exec(t, "--executor", id, "--", "sh", "-c", "echo hello from $(hostname)")
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || !strings.Contains(out, "hello from") {
			t.Fatalf("%s: %v\n%s", id, err, out)
		}
	}
	// The client's network holds the relay but neither executor.
	out, err := run(t, s.dir, s.env, "docker-compose", "run", "--rm", "-T", "--entrypoint", "/bin/sh", "client", "-c",
		"nslookup relay >/dev/null 2>&1 && echo relay-visible; nslookup exec1 >/dev/null 2>&1 && echo exec1-visible; true")
	if err != nil || !strings.Contains(out, "relay-visible") || strings.Contains(out, "exec1-visible") {
		t.Fatalf("network isolation: %v\n%s", err, out)
	}
}

func waitReady(t *testing.T, s *stack, id string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		if _, err := s.exec(t, "--executor", id, "--", "true"); err == nil {
			return
		} else if time.Now().After(deadline) {
			t.Fatalf("%s never became reachable: %v", id, err)
		}
	}
}

func TestWrongTokenAndWrongRelayKeyAreRejected(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	// Both are refusals, told apart from an unreachable relay by outpost
	// exec's exit status (exitRefused in cmd/outpost/exitcodes.go), which
	// docker-compose run passes on.
	const exitRefused = 118
	refused := func(err error) bool {
		var ee *exec.ExitError
		return errors.As(err, &ee) && ee.ExitCode() == exitRefused
	}
	_, err := s.execWith(t, []string{"OUTPOST_TOKEN=opt_wrong"}, "--executor", "exec1", "--", "true")
	if !refused(err) {
		t.Fatalf("wrong token: %v", err)
	}
	other, _ := identity.Generate()
	_, err = s.execWith(t, []string{"OUTPOST_RELAY=outpost://relay:7443#" + other.PublicKey().Fingerprint()}, "--executor", "exec1", "--", "true")
	if !refused(err) {
		t.Fatalf("wrong relay key: %v", err)
	}
}

func TestRelayRestartWhileACommandStreams(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	done := make(chan struct{})
	var out string
	var err error
	go func() {
		defer close(done)
		// 40,000 lines over about 8 s; the relay restarts in the middle.
		out, err = s.exec(t, "--executor", "exec1", "--", "sh", "-c", "i=0; while [ $i -lt 40 ]; do seq $((i*1000+1)) $((i*1000+1000)); sleep 0.2; i=$((i+1)); done")
	}()
	time.Sleep(2 * time.Second)
	if o, err := run(t, s.dir, s.env, "docker-compose", "restart", "-t", "1", "relay"); err != nil {
		t.Fatalf("restart: %v\n%s", err, o)
	}
	<-done
	if err != nil {
		t.Fatalf("the streaming command failed across the relay restart: %v\n%s", err, tail(out))
	}
	var want strings.Builder
	for i := 1; i <= 40000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	if out != want.String() {
		i := 0
		for i < len(out) && i < want.Len() && out[i] == want.String()[i] {
			i++
		}
		t.Fatalf("output differs after the relay restart: got %d bytes, want %d; first difference at %d: %q", len(out), want.Len(), i, out[max(0, i-40):min(len(out), i+160)])
	}
}

func TestStoppedExecutorFailsCleanly(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec2")
	if o, err := run(t, s.dir, s.env, "docker-compose", "stop", "-t", "1", "exec2"); err != nil {
		t.Fatalf("stop: %v\n%s", err, o)
	}
	start := time.Now()
	_, err := s.exec(t, "--executor", "exec2", "--", "true")
	if err == nil || !strings.Contains(err.Error(), "offline") {
		t.Fatalf("stopped executor: %v", err)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Fatalf("took %v to report the executor offline", d)
	}
}

func tail(s string) string {
	if len(s) > 200 {
		return s[len(s)-200:]
	}
	return s
}

func TestSandboxDenialInsideAContainer(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	out, err := s.exec(t, "--executor", "exec1", "--sandbox", "workspace-write", "--cwd", "/tmp", "--", "sh", "-c", "echo ok > /tmp/inside && echo wrote-inside && echo x > /usr/bin/escape")
	if err == nil || !strings.Contains(out, "wrote-inside") || !strings.Contains(err.Error(), "denied by the sandbox") {
		t.Fatalf("sandbox in a container: %v\n%s", err, out)
	}
	// The executor ran it through the outpost-sandbox installed beside it.
	logs, _ := run(t, s.dir, s.env, "docker-compose", "logs", "--no-color", "exec1")
	if !strings.Contains(logs, "sandbox helper") || !strings.Contains(logs, "/usr/bin/outpost-sandbox") {
		t.Fatalf("the executor did not pick up /usr/bin/outpost-sandbox:\n%s", tail(logs))
	}
}

func TestJunkAndHalfOpenConnectionsLeaveTheRelayHealthy(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	// From the client network: garbage, a truncated handshake, and
	// connections left open without a word.
	script := `
for i in 1 2 3; do printf 'GET / HTTP/1.1\r\n\r\n' | nc -w 1 relay 7443; done
printf 'OP\001\001\000\377' | nc -w 1 relay 7443
for i in 1 2 3 4 5; do (sleep 30 | nc relay 7443 &) ; done
sleep 1; echo junk-sent`
	out, err := run(t, s.dir, s.env, "docker-compose", "run", "--rm", "-T", "--entrypoint", "/bin/sh", "client", "-c", script)
	if err != nil || !strings.Contains(out, "junk-sent") {
		t.Fatalf("sending junk: %v\n%s", err, out)
	}
	got, err := s.exec(t, "--executor", "exec1", "--", "echo", "still-healthy")
	if err != nil || got != "still-healthy\n" {
		t.Fatalf("after junk: %q %v", got, err)
	}
}

func TestDisconnectedExecutorIsOfflineThenRejoins(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	container := func(svc string) string {
		out, err := run(t, s.dir, s.env, "docker-compose", "ps", "-q", svc)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}
	exec1, network := container("exec1"), s.project+"_relay_exec1"
	if out, err := run(t, "", nil, "docker", "network", "disconnect", network, exec1); err != nil {
		t.Fatalf("disconnect: %v\n%s", err, out)
	}
	// The relay notices within its keepalive bound (a ping every 10 s, answered within 10 s).
	start := time.Now()
	for {
		_, err := s.exec(t, "--executor", "exec1", "--", "true")
		if err != nil && strings.Contains(err.Error(), "offline") {
			break
		}
		if time.Since(start) > 90*time.Second {
			t.Fatalf("exec1 still reachable 90 s after its network was cut: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	t.Logf("offline reported %v after the disconnect", time.Since(start).Round(time.Second))
	if out, err := run(t, "", nil, "docker", "network", "connect", network, exec1); err != nil {
		t.Fatalf("connect: %v\n%s", err, out)
	}
	waitReady(t, s, "exec1")
}

func TestProcessOutputResumesAfterTheExecutorsNetworkReturns(t *testing.T) {
	s := setup(t)
	waitReady(t, s, "exec1")
	container, err := run(t, s.dir, s.env, "docker-compose", "ps", "-q", "exec1")
	if err != nil {
		t.Fatal(err)
	}
	exec1, network := strings.TrimSpace(container), s.project+"_relay_exec1"
	done := make(chan struct{})
	var out string
	var xerr error
	go func() {
		defer close(done)
		// 60 lines, one every half second; the executor's network is cut
		// in the middle and restored.
		out, xerr = s.exec(t, "--offline-grace", "120s", "--reconnect-for", "150s", "--executor", "exec1", "--", "sh", "-c", "i=1; while [ $i -le 60 ]; do echo line-$i; sleep 0.5; i=$((i+1)); done")
	}()
	time.Sleep(3 * time.Second)
	if o, err := run(t, "", nil, "docker", "network", "disconnect", network, exec1); err != nil {
		t.Fatalf("disconnect: %v\n%s", err, o)
	}
	time.Sleep(20 * time.Second)
	if o, err := run(t, "", nil, "docker", "network", "connect", network, exec1); err != nil {
		t.Fatalf("connect: %v\n%s", err, o)
	}
	<-done
	if xerr != nil {
		t.Fatalf("the client did not resume: %v\n%s", xerr, out)
	}
	var want strings.Builder
	for i := 1; i <= 60; i++ {
		fmt.Fprintf(&want, "line-%d\n", i)
	}
	if out != want.String() {
		t.Fatalf("output after the network returned:\n%s", out)
	}
}
