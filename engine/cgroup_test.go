//go:build linux

package engine

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/internal/proctest"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// cgroupBackend is a LocalBackend that gives every command a cgroup; the
// test is skipped where cgroup v2 is not writable.
func cgroupBackend(t *testing.T) *LocalBackend {
	t.Helper()
	m, err := cgroup.Open(cgroup.DefaultConfig())
	if errors.Is(err, cgroup.ErrUnavailable) {
		testdeps.Missing(t, "cgroup", "no per-command cgroups on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	b := NewLocalBackend()
	b.TerminateGrace = 200 * time.Millisecond
	b.Cgroups = m
	return b
}

// escapee starts a shell that puts a sleeper in a session of its own —
// out of the command's process group — and then waits; it returns the
// process and the sleeper's pid.
func escapee(t *testing.T, b *LocalBackend, then string) (Process, *proctest.Proc) {
	t.Helper()
	p := startLocal(t, b, Spec{Argv: []string{"/bin/sh", "-c", "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; " + then}})
	out := waitOutput(t, p, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("sleeper pid: %q", out)
	}
	sleeper := proctest.Watch(t, pid)
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		if sid, _ := unix.Getsid(pid); sid == pid {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the sleeper never left the session")
		}
	}
	return p, sleeper
}

func waitGoneOrFail(t *testing.T, p *proctest.Proc, what string) {
	t.Helper()
	if !p.WaitGone(testTimeout) {
		t.Fatalf("%s: process %d still runs", what, p.Pid)
	}
}

func TestTerminateKillsADescendantThatCalledSetsid(t *testing.T) {
	b := cgroupBackend(t)
	p, sleeper := escapee(t, b, "sleep 300")
	if !p.Terminate() {
		t.Fatal("terminate reported not running")
	}
	collect(t, p)
	waitGoneOrFail(t, sleeper, "after terminate")
}

// The leader exits on TERM at once; the escaped descendant ignores TERM,
// so only the kill at the end of the grace period ends it.
func TestTerminateKillsAnEscapedDescendantThatIgnoresTERMAfterTheGrace(t *testing.T) {
	b := cgroupBackend(t)
	ready := filepath.Join(t.TempDir(), "ready")
	p := startLocal(t, b, Spec{Argv: []string{"/bin/sh", "-c", `setsid sh -c 'trap "" TERM; echo $$ >` + ready + `.tmp; mv ` + ready + `.tmp ` + ready + `; exec sleep 300' </dev/null >/dev/null 2>&1 & sleep 300`}})
	var pid int
	for deadline := time.Now().Add(testTimeout); ; time.Sleep(5 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil {
			pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the escapee never became ready")
		}
	}
	escaped := proctest.Watch(t, pid)
	terminated := time.Now()
	p.Terminate()
	collect(t, p) // the leader is gone; the escapee ignores TERM
	if escaped.Gone() {
		t.Fatal("the escapee died of TERM, which it ignores")
	}
	waitGoneOrFail(t, escaped, "after the grace")
	if d := time.Since(terminated); d < b.TerminateGrace {
		t.Fatalf("killed after %v, before the grace of %v", d, b.TerminateGrace)
	}
}

// A command may leave a background process on purpose (a dev server);
// it runs on after the command ends, until a terminate or Kill reaches it.
func TestBackgroundProcessOutlivesItsCommandUntilKilled(t *testing.T) {
	b := cgroupBackend(t)
	p, background := escapee(t, b, "exit 0")
	collect(t, p)
	if background.Gone() {
		t.Fatal("the background process died with its command")
	}
	for deadline := time.Now().Add(testTimeout); b.Cgroups.Lingering() != 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) { // released just after the close
			t.Fatalf("lingering cgroups %d, want 1", b.Cgroups.Lingering())
		}
	}
	if p.Terminate() {
		t.Fatal("terminate of a finished command reported it running")
	}
	waitGoneOrFail(t, background, "after terminate of the finished command")
}

func TestClosingTheCgroupsKillsWhatCommandsLeftBehind(t *testing.T) {
	b := cgroupBackend(t)
	p, background := escapee(t, b, "exit 0")
	collect(t, p)
	b.Cgroups.Close()
	waitGoneOrFail(t, background, "after the executor's cgroups closed")
}

// Without cgroups the same escapee survives a terminate: the failure the
// cgroups exist for.
func TestWithoutCgroupsASetsidDescendantEscapesTerminate(t *testing.T) {
	b := NewLocalBackend()
	b.TerminateGrace = 50 * time.Millisecond
	p, sleeper := escapee(t, b, "sleep 300")
	p.Terminate()
	collect(t, p)
	if sleeper.Gone() {
		t.Fatal("the escapee died without cgroups; this test no longer shows what cgroups add")
	}
}
