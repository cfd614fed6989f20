package client

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// The executor's own environment in these tests: unlike this process's,
// so that what the child gets is seen to come from the executor.
var executorEnv = []string{
	"HOME=/home/outpost-executor-test", "USER=outpost-executor-test", "LOGNAME=outpost-executor-test",
	"PATH=/usr/local/bin:/usr/bin:/bin:/opt/outpost-executor-test/bin", "SHELL=/bin/sh",
	"NOT_CORE=1", "API_TOKEN=secret",
}

func executorWithEnv(t *testing.T) *Remote {
	t.Helper()
	ex := startExecutor(t, func(c *executor.Config, _ *executor.NativeConfig) { c.BaseEnv = executorEnv })
	return dial(t, ex.url, Config{})
}

// envOf runs env(1) and returns the child's environment, sorted.
func envOf(t *testing.T, cmd *Cmd) []string {
	t.Helper()
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v", cmd.Args, err)
	}
	lines := strings.Fields(string(out))
	if lines == nil {
		lines = []string{}
	}
	return lines
}

func TestCommandEnvIsOsExecsOnTheExecutor(t *testing.T) {
	env := executorWithEnv(t)
	core := []string{"HOME=/home/outpost-executor-test", "LOGNAME=outpost-executor-test",
		"PATH=/usr/local/bin:/usr/bin:/bin:/opt/outpost-executor-test/bin", "SHELL=/bin/sh", "USER=outpost-executor-test"}

	// nil: the executor's core variables, as outpost exec gives them.
	if got := envOf(t, Command(env, "env")); !reflect.DeepEqual(got, core) {
		t.Fatalf("nil Env: %q, want %q", got, core)
	}
	p, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"env"}, EnvPolicy: &protocol.EnvPolicy{Inherit: protocol.InheritCore}})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := p.Wait(ctxT(t)); err != nil || !reflect.DeepEqual(strings.Fields(string(res.Stdout)), core) {
		t.Fatalf("outpost exec's params give %q %v; Cmd must match", res.Stdout, err)
	}

	// non-nil: exactly these, as os/exec; an empty Env is no variables.
	cmd := Command(env, "/usr/bin/env")
	cmd.Env = []string{"FOO=bar", "FOO=baz", "EMPTY="}
	if got, want := envOf(t, cmd), []string{"EMPTY=", "FOO=baz"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("Env set: %q, want %q", got, want)
	}
	cmd = Command(env, "/usr/bin/env")
	cmd.Env = []string{}
	if got := envOf(t, cmd); len(got) != 0 {
		t.Fatalf("empty Env: %q", got)
	}

	// InheritEnv: laid over the executor's.
	cmd = Command(env, "env")
	cmd.Env, cmd.InheritEnv = []string{"FOO=bar", "HOME=/elsewhere"}, true
	want := append([]string{"FOO=bar", "HOME=/elsewhere"}, core[1:]...)
	if got := envOf(t, cmd); !reflect.DeepEqual(got, want) {
		t.Fatalf("InheritEnv: %q, want %q", got, want)
	}

	// An entry the wire cannot carry is refused before anything starts.
	cmd = Command(env, "env")
	cmd.Env = []string{"NOT_KEY_VALUE"}
	if err := cmd.Run(); err == nil || cmd.Process != nil {
		t.Fatalf("an entry without '=' ran: %v", err)
	}
}

func TestCommandSpawnErrorsAreOsExecs(t *testing.T) {
	env := executorWithEnv(t)
	dir := t.TempDir()
	plain := filepath.Join(dir, "plain")
	if err := os.WriteFile(plain, []byte("#!/bin/sh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	inMissingDir := Command(env, "true")
	inMissingDir.Dir = filepath.Join(dir, "gone")
	for _, c := range []struct {
		name                     string
		cmd                      *Cmd
		kind                     protocol.Kind
		notFound, notExist, perm bool
	}{
		{"missing by name", Command(env, "outpost-no-such-program"), protocol.KindNotFound, true, true, false},
		{"missing by path", Command(env, filepath.Join(dir, "missing")), protocol.KindNotFound, true, true, false},
		{"not executable", Command(env, plain), protocol.KindPermission, false, false, true},
		{"missing working directory", inMissingDir, protocol.KindNotFound, false, true, false},
	} {
		err := c.cmd.Run()
		var se *SpawnError
		if !errors.As(err, &se) || c.cmd.Process != nil {
			t.Errorf("%s: %T %v, want a *SpawnError", c.name, err, err)
			continue
		}
		if k := protocol.KindOf(err); k != c.kind {
			t.Errorf("%s: kind %q, want %q (%v)", c.name, k, c.kind, err)
		}
		if errors.Is(err, exec.ErrNotFound) != c.notFound || errors.Is(err, fs.ErrNotExist) != c.notExist || errors.Is(err, fs.ErrPermission) != c.perm {
			t.Errorf("%s: Is ErrNotFound %v, ErrNotExist %v, ErrPermission %v; want %v %v %v (%v)", c.name,
				errors.Is(err, exec.ErrNotFound), errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission), c.notFound, c.notExist, c.perm, err)
		}
	}
	// The PATH a missing program was looked up in is the one the child
	// would have had: the executor's, which it inherits.
	err := Command(env, "outpost-no-such-program").Run()
	if !strings.Contains(err.Error(), "/opt/outpost-executor-test/bin") {
		t.Fatalf("the message does not name the child's PATH: %v", err)
	}
}

// A command started while the connection is being replaced must not be
// "caught up" before the executor has answered its start: the catch-up
// would ask for the events of a process the executor does not know yet,
// and fail it. The reconnect is held until the start waits for it; which
// of the two requests then reaches the executor first is a race, hence
// the repetitions.
func TestCommandStartedDuringAReconnectRuns(t *testing.T) {
	env := dial(t, startExecutor(t, nil).url, Config{})
	redial := env.dial
	for i := range 20 {
		gate := make(chan struct{})
		env.dial = func(ctx context.Context, route func(string, transport.Params, bool)) (*conn, error) {
			<-gate
			return redial(ctx, route)
		}
		env.dropConnection()
		waitFor(t, "the drop to be noticed", func() bool { env.mu.Lock(); defer env.mu.Unlock(); return env.cur == nil })
		type result struct {
			out []byte
			err error
		}
		done := make(chan result, 1)
		go func() {
			out, err := Command(env, "echo", "after").Output()
			done <- result{out, err}
		}()
		waitFor(t, "the start to wait for the connection", func() bool { env.mu.Lock(); defer env.mu.Unlock(); return len(env.procs) == 1 })
		close(gate)
		if r := <-done; r.err != nil || string(r.out) != "after\n" {
			t.Fatalf("run %d: %q %v", i, r.out, r.err)
		}
	}
}

// waitFor polls cond, which the code under test makes true on its own
// goroutine and leaves so, until the test's deadline.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := ctxT(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		default:
			runtime.Gosched()
		}
	}
}
