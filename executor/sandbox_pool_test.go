//go:build linux

package executor

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/protocol"
)

// Pre-started sandbox helpers (engine's sandbox pool): every command runs
// in a helper of its own, exactly as a helper started for it would run
// it; an empty or broken pool falls back without the caller noticing; and
// no pooled helper outlives the executor, however it ends.

// newPoolSession returns a session of a server whose backend keeps size
// pre-started helpers, warmed and full.
func newPoolSession(t *testing.T, size int) (*Server, *Session, *engine.LocalBackend) {
	t.Helper()
	requireUserNamespaces(t)
	b := engine.NewLocalBackend()
	b.SandboxPool = size
	srv, sess := newTestSession(t, b)
	if size > 0 {
		b.WarmSandbox(srv.cfg.SandboxUser)
		waitPoolFull(t, b)
	}
	return srv, sess, b
}

// waitPoolFull waits until every helper of b's pool is ready.
func waitPoolFull(t *testing.T, b *engine.LocalBackend) engine.SandboxPoolStats {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		st, ok := b.SandboxPoolStats()
		if ok && st.Ready == st.Size {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sandbox pool did not fill: %+v (exists %v)", st, ok)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// pooledHelpers lists the pre-started helpers that are children of pid.
func pooledHelpers(t *testing.T, parent int) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if !strings.HasPrefix(string(cmdline), "outpost-sandbox\x00--pooled\x00") {
			continue
		}
		if parent == 0 || ppid(pid) == parent {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ppid is pid's parent, 0 if pid is gone.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(fields) < 2 {
		return 0
	}
	n, _ := strconv.Atoi(fields[1])
	return n
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	fields := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(fields) > 0 && fields[0] != "Z"
}

// waitGone waits until every helper in pids has ended.
func waitGone(t *testing.T, pids []int, outlived string) {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pooled helper %d outlived %s", pid, outlived)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

// poolCases are commands whose observable result must not depend on
// whether a pooled helper ran them.
var poolCases = []struct {
	name   string
	params protocol.ExecParams
}{
	{"output and status", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}}},
	{"PATH lookup, environment", protocol.ExecParams{Argv: []string{"sh", "-c", `echo "$GREETING"; echo "$OUTPOST_SANDBOX"`}, Env: map[string]string{"GREETING": "hello there", "PATH": "/usr/bin:/bin"}}},
	{"working directory", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "pwd"}}},
	{"signalled by itself", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "kill -TERM $$"}}},
	{"own PID namespace and /proc", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "test -d /proc/1 && echo init-visible; test -d /proc/$HOST_PID || echo executor-hidden"}, Env: map[string]string{"HOST_PID": strconv.Itoa(os.Getpid())}}},
	{"stdin", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "cat; echo done"}, PipeStdin: true}},
	{"terminal", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "tty >/dev/null && echo has-tty; test -t 0 && echo stdin-tty"}, Tty: true}},
	{"command not found", protocol.ExecParams{Argv: []string{"no-such-command-here"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}}},
	{"denied write", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo x > /etc/outpost-pool-test"}}},
	{"no inherited descriptors", protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "ls /proc/self/fd | wc -l"}}},
	// The executor's markers, appended after the client's variables, win
	// — for every program, not just shells, which keep the last value.
	{"markers over the client's variables", protocol.ExecParams{Argv: []string{"/usr/bin/env"}, Env: map[string]string{"PATH": "/usr/bin:/bin", "OUTPOST_SANDBOX": "none", "CODEX_SANDBOX_NETWORK_DISABLED": "0"}}},
}

type poolResult struct {
	out          string
	code, signal int32
	denied       bool
}

func runPoolCase(t *testing.T, sess *Session, cwd string, p protocol.ExecParams) poolResult {
	t.Helper()
	p.ProcessID = fmt.Sprintf("pool-%d", newID())
	p.Cwd = cwd
	p.Sandbox = map[string]any{"mode": "workspace-write"}
	if p.Env == nil {
		p.Env = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}
	}
	if _, err := sess.Start(context.Background(), p); err != nil {
		t.Fatalf("start: %v", err)
	}
	proc := sess.lookup(p.ProcessID).proc
	if p.PipeStdin {
		if _, err := proc.Write([]byte("from stdin\n"), "", true); err != nil {
			t.Fatal(err)
		}
	}
	evs := collect(t, proc)
	// Each stream on its own: how two pipes interleave is the scheduler's.
	r := poolResult{out: output(evs, protocol.StreamStdout) + output(evs, protocol.StreamPty)}
	if errOut := output(evs, protocol.StreamStderr); errOut != "" {
		r.out += "[stderr]" + errOut
	}
	for _, e := range evs {
		if e.Kind == engine.EventExited {
			r.code, r.signal, r.denied = e.ExitCode, e.Signal, e.SandboxDenied
		}
	}
	return r
}

func TestSandboxPoolBehavesAsAFreshHelper(t *testing.T) {
	_, cold, coldBackend := newPoolSession(t, 0)
	_, warm, warmBackend := newPoolSession(t, len(poolCases))
	cwd := t.TempDir()
	for _, c := range poolCases {
		t.Run(c.name, func(t *testing.T) {
			want := runPoolCase(t, cold, cwd, c.params)
			got := runPoolCase(t, warm, cwd, c.params)
			if got != want {
				t.Fatalf("pooled helper: %+v\nfresh helper: %+v", got, want)
			}
			if c.name == "output and status" && (want.code != 3 || !strings.Contains(want.out, "out")) {
				t.Fatalf("unexpected result: %+v", want)
			}
			if c.name == "own PID namespace and /proc" && want.out != "init-visible\nexecutor-hidden\n" {
				t.Fatalf("the command must see its own PID namespace only: %+v", want)
			}
			if c.name == "denied write" && !want.denied {
				t.Fatalf("the write outside the workspace must be denied: %+v", want)
			}
		})
	}
	if _, ok := coldBackend.SandboxPoolStats(); ok {
		t.Fatal("a backend without a pool made one")
	}
	st, _ := warmBackend.SandboxPoolStats()
	if st.Taken != uint64(len(poolCases)) || st.Missed != 0 {
		t.Fatalf("every case must run in a pooled helper: %+v", st)
	}
}

func TestSandboxPoolHelperServesOneCommand(t *testing.T) {
	_, sess, b := newPoolSession(t, 2)
	cwd := t.TempDir()
	// Two commands running at once (namespace numbers are reused once
	// one is gone) have a PID, user and mount namespace each, and their
	// own helpers.
	var procs []engine.Process
	seen := map[string]bool{}
	for i := range 2 {
		id := fmt.Sprintf("pool-%d", newID())
		if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "readlink /proc/self/ns/pid /proc/self/ns/user /proc/self/ns/mnt; echo ready; sleep 600"}, Cwd: cwd, Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil {
			t.Fatal(err)
		}
		p := sess.lookup(id).proc
		procs = append(procs, p)
		out := waitOutput(t, p, "ready")
		f := strings.Fields(out)
		if len(f) != 4 {
			t.Fatalf("run %d: %q", i, out)
		}
		for _, ns := range f[:3] {
			if seen[ns] {
				t.Fatalf("run %d shares %s with the other command", i, ns)
			}
			seen[ns] = true
		}
	}
	for _, p := range procs {
		p.Kill()
		collect(t, p)
	}
	if st, _ := b.SandboxPoolStats(); st.Taken != 2 {
		t.Fatalf("%+v", st)
	}
}

func TestSandboxPoolTerminateAndSignals(t *testing.T) {
	_, sess, b := newPoolSession(t, 2)
	cwd := t.TempDir()
	// TERM to the group reaches the command; the helper drops it.
	id := fmt.Sprintf("pool-%d", newID())
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done"}, Cwd: cwd, Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil {
		t.Fatal(err)
	}
	proc := sess.lookup(id).proc
	waitOutput(t, proc, "ready")
	if err := proc.Signal(protocol.SignalTerminate); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, proc)
	if out := output(evs, ""); !strings.Contains(out, "got-term") {
		t.Fatalf("the command did not get TERM: %q", out)
	}
	if code := exitCode(t, evs); code != 7 {
		t.Fatalf("exit %d, want 7", code)
	}
	// Terminate of a command that ignores TERM: KILL after the grace.
	id = fmt.Sprintf("pool-%d", newID())
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "trap '' TERM; echo ready; while :; do sleep 0.05; done"}, Cwd: cwd, Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil {
		t.Fatal(err)
	}
	proc = sess.lookup(id).proc
	waitOutput(t, proc, "ready")
	if !proc.Terminate() {
		t.Fatal("terminate: not running")
	}
	evs = collect(t, proc)
	if code := exitCode(t, evs); code != 128+int32(syscall.SIGKILL) {
		t.Fatalf("exit %d after terminate, want %d", code, 128+int32(syscall.SIGKILL))
	}
	if st, _ := b.SandboxPoolStats(); st.Taken != 2 {
		t.Fatalf("both commands must have run in pooled helpers: %+v", st)
	}
}

func TestSandboxPoolFallsBackWhenItsHelpersDied(t *testing.T) {
	_, sess, b := newPoolSession(t, 2)
	helpers := pooledHelpers(t, os.Getpid())
	if len(helpers) < 2 {
		t.Fatalf("found %d pooled helpers of this process, want 2", len(helpers))
	}
	for _, pid := range helpers {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	// The pool still lists them; each start finds its helper dead, starts
	// the usual way and loses nothing.
	cwd := t.TempDir()
	for i := range 2 {
		r := runPoolCase(t, sess, cwd, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo fine"}})
		if r.code != 0 || r.out != "fine\n" {
			t.Fatalf("start %d after the helpers died: %+v", i, r)
		}
	}
	st, _ := b.SandboxPoolStats()
	if st.Missed < 2 {
		t.Fatalf("the dead helpers must have been passed over: %+v", st)
	}
	// And it refills with live ones.
	waitPoolFull(t, b)
	r := runPoolCase(t, sess, cwd, protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo pooled"}})
	if st2, _ := b.SandboxPoolStats(); r.out != "pooled\n" || st2.Taken != st.Taken+1 {
		t.Fatalf("after refilling: %+v %+v", r, st2)
	}
}

func TestSandboxPoolBurstNeverFails(t *testing.T) {
	_, sess, b := newPoolSession(t, 2)
	cwd := t.TempDir()
	const n = 24
	var wg sync.WaitGroup
	errs := make(chan string, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("burst-%d-%d", i, newID())
			if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "echo n=" + strconv.Itoa(i)}, Cwd: cwd, Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil {
				errs <- err.Error()
				return
			}
			evs := collect(t, sess.lookup(id).proc)
			if out := output(evs, ""); out != "n="+strconv.Itoa(i)+"\n" || exitCode(t, evs) != 0 {
				errs <- fmt.Sprintf("start %d: %q exit %d", i, out, exitCode(t, evs))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	st, _ := b.SandboxPoolStats()
	if st.Taken+st.Missed != n || st.Taken == 0 {
		t.Fatalf("%+v", st)
	}
}

func TestSandboxPoolShutdownLeavesNoHelper(t *testing.T) {
	srv, _, _ := newPoolSession(t, 3)
	helpers := pooledHelpers(t, os.Getpid())
	if len(helpers) != 3 {
		t.Fatalf("%d pooled helpers, want 3", len(helpers))
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	for _, pid := range helpers {
		if alive(pid) {
			t.Errorf("pooled helper %d outlived the shutdown", pid)
		}
	}
}

// TestSandboxPoolDiesWithACrashedExecutor kills an executor (this test
// binary in the role, OUTPOST_TEST_POOL_EXECUTOR) with SIGKILL: its
// pooled helpers must not outlive it.
func TestSandboxPoolDiesWithACrashedExecutor(t *testing.T) {
	requireUserNamespaces(t)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "OUTPOST_TEST_POOL_EXECUTOR=3")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "pool full" {
		t.Fatalf("the executor did not fill its pool: %q %v", line, err)
	}
	helpers := pooledHelpers(t, cmd.Process.Pid)
	if len(helpers) != 3 {
		t.Fatalf("%d pooled helpers of the executor, want 3", len(helpers))
	}
	cmd.Process.Kill()
	cmd.Wait()
	waitGone(t, helpers, "its executor")
}

// poolExecutorMain is the executor TestSandboxPoolDiesWithACrashedExecutor
// kills: it fills a pool of size helpers, says so, and waits.
func poolExecutorMain(size int) {
	b := engine.NewLocalBackend()
	b.SandboxPool = size
	cfg := DefaultConfig()
	cfg.DefaultCwd = os.TempDir()
	cfg.Backend = b
	srv, err := NewServer(cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	b.WarmSandbox(srv.cfg.SandboxUser)
	for {
		if st, ok := b.SandboxPoolStats(); ok && st.Ready == size {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	fmt.Println("pool full")
	select {}
}

func init() {
	if v := os.Getenv("OUTPOST_TEST_POOL_EXECUTOR"); v != "" && filepath.Base(os.Args[0]) != "outpost-sandbox" {
		n, _ := strconv.Atoi(v)
		poolExecutorMain(n)
	}
}

// A pooled helper is born in the cgroup its command runs in, with the
// command limits already set, and a terminate reaches everything the
// command started there.
func TestSandboxPoolHelperIsBornInTheCommandsCgroup(t *testing.T) {
	requireUserNamespaces(t)
	m, err := cgroup.Open(cgroup.DefaultConfig())
	if err != nil {
		testdeps.Missing(t, "cgroup", "no per-command cgroups on this machine: %v", err)
	}
	t.Cleanup(m.Close)
	b := engine.NewLocalBackend()
	b.SandboxPool = 2
	b.Cgroups = m
	srv, sess := newTestSession(t, b)
	b.WarmSandbox(srv.cfg.SandboxUser)
	waitPoolFull(t, b)
	helpers := pooledHelpers(t, os.Getpid())
	if len(helpers) != 2 {
		t.Fatalf("%d pooled helpers", len(helpers))
	}
	for _, pid := range helpers {
		cg, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
		if !strings.Contains(string(cg), filepath.Base(m.Status().Dir)+"/cmd-") {
			t.Fatalf("pooled helper %d is not in a command cgroup: %s", pid, cg)
		}
	}
	id := fmt.Sprintf("pool-%d", newID())
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "setsid sh -c 'trap \"\" TERM; sleep 600' </dev/null >/dev/null 2>&1 & cat /proc/self/cgroup; echo started; sleep 600"}, Cwd: t.TempDir(), Sandbox: map[string]any{"mode": "workspace-write"}}); err != nil {
		t.Fatal(err)
	}
	proc := sess.lookup(id).proc
	out := waitOutput(t, proc, "started")
	if !strings.Contains(out, "/cmd-") {
		t.Fatalf("the command is not in its cgroup: %q", out)
	}
	if st, _ := b.SandboxPoolStats(); st.Taken != 1 {
		t.Fatalf("%+v", st)
	}
	proc.Terminate()
	collect(t, proc)
	deadline := time.Now().Add(testTimeout)
	for m.Lingering() > 0 || len(cgroupDirs(t, m.Status().Dir)) > 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the command's cgroup outlived the terminate: lingering %d, dirs %v", m.Lingering(), cgroupDirs(t, m.Status().Dir))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// cgroupDirs lists the command cgroups under dir (the pool's included).
func cgroupDirs(t *testing.T, dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "cmd-") {
			out = append(out, e.Name())
		}
	}
	return out
}

// A pooled helper's mount namespace is a copy of the executor's made when
// it started. A file system mounted over a workspace after the pool filled
// must be what the command sees and writes, as for a helper started for it
// (found by a red-team review: the pool now retires its helpers when the
// mount table changes).
func TestSandboxPoolSeesMountsMadeAfterItFilled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only (mounts on the host)")
	}
	run := func(t *testing.T, size int) string {
		_, sess, _ := newPoolSession(t, size)
		ws, err := os.MkdirTemp("/tmp", "rt-ws-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(ws)
		os.Chmod(ws, 0o755)
		os.Chown(ws, 65534, 65534) // the command's user: bound by path
		// Mounted after the pool filled.
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "uid=65534,gid=65534,mode=0755,size=1m", "tmpfs", ws).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v %s", err, out)
		}
		defer exec.Command("umount", ws).Run()
		os.WriteFile(filepath.Join(ws, "on-the-mount"), []byte("x"), 0o644)
		r := sh(t, sess, ws, workspaceWrite, "ls; echo made > made.txt && echo wrote")
		_, err = os.Stat(filepath.Join(ws, "made.txt"))
		return fmt.Sprintf("%q, made.txt on the host's mount: %v", r.out, err == nil)
	}
	fresh, pooled := run(t, 0), run(t, 1)
	if fresh != pooled {
		t.Fatalf("pooled helper: %s\nfresh helper: %s", pooled, fresh)
	}
}

// The converse: a file system the host unmounts after the pool filled must
// not be reachable from the next command (nor pinned by the idle helpers'
// copies of the mount table).
func TestSandboxPoolForgetsMountsUndoneAfterItFilled(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only (mounts on the host)")
	}
	run := func(t *testing.T, size int) string {
		dir, err := os.MkdirTemp("/tmp", "rt-vol-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(dir)
		os.Chmod(dir, 0o755)
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
			t.Fatalf("mount: %v %s", err, out)
		}
		os.WriteFile(filepath.Join(dir, "secret"), []byte("still-here"), 0o644)
		_, sess, _ := newPoolSession(t, size) // the pool fills while it is mounted
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Fatalf("umount: %v %s", err, out)
		}
		r := sh(t, sess, t.TempDir(), workspaceWrite, "cat "+filepath.Join(dir, "secret")+" 2>&1; grep -c rt-vol /proc/self/mountinfo")
		return strings.ReplaceAll(r.out, dir, "DIR")
	}
	fresh, pooled := run(t, 0), run(t, 1)
	if fresh != pooled || strings.Contains(pooled, "still-here") {
		t.Fatalf("the pooled command reached a file system the host had unmounted: pooled %q, fresh %q", pooled, fresh)
	}
}

// Without any start, a change of the mount table retires the ready
// helpers (none keeps an unmounted file system pinned) and the pool fills
// again with helpers that see the new table.
func TestSandboxPoolRetiresItsHelpersWhenMountsChange(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("root only (mounts on the host)")
	}
	_, _, b := newPoolSession(t, 2)
	before := pooledHelpers(t, os.Getpid())
	if len(before) != 2 {
		t.Fatalf("%d pooled helpers, want 2", len(before))
	}
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
		t.Fatalf("umount: %v %s", err, out)
	}
	waitGone(t, before, "a change of the mount table")
	waitPoolFull(t, b)
	if after := pooledHelpers(t, os.Getpid()); len(after) != 2 {
		t.Fatalf("%d pooled helpers after the refill, want 2", len(after))
	}
}
