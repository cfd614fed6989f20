//go:build linux || darwin || freebsd

package executor

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// TestMain lets this test binary act as the sandbox helper (the executor
// re-executes its own binary) and as a small network probe.
func TestMain(m *testing.M) {
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	if addr := os.Getenv("OUTPOST_TEST_DIAL"); addr != "" {
		os.Exit(netProbe(os.Getenv("OUTPOST_TEST_NET"), addr))
	}
	os.Exit(m.Run())
}

// netProbe tries one network operation and reports it on stdout.
func netProbe(mode, addr string) int {
	var err error
	switch mode {
	case "udp":
		var c net.Conn
		if c, err = net.Dial("udp", addr); err == nil {
			_, err = c.Write([]byte("x"))
			c.Close()
		}
	case "listen":
		var l net.Listener
		if l, err = net.Listen("tcp", "127.0.0.1:0"); err == nil {
			l.Close()
		}
	case "resolve":
		// A name no hosts file holds, through Go's own resolver: the
		// lookup needs a UDP socket.
		r := &net.Resolver{PreferGo: true}
		_, err = r.LookupHost(context.Background(), "outpost-sandbox-test.invalid")
	case "unix":
		var c net.Conn
		if c, err = net.Dial("unix", addr); err == nil {
			c.Close()
		}
	case "unixpair":
		var fds [2]int
		fds, err = syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err == nil {
			syscall.Close(fds[0])
			syscall.Close(fds[1])
		}
	default:
		var c net.Conn
		if c, err = net.Dial("tcp", addr); err == nil {
			c.Close()
		}
	}
	if err != nil {
		fmt.Println(mode, "failed:", err)
		return 3
	}
	fmt.Println(mode, "ok")
	return 0
}

type sandboxRun struct {
	out    string
	code   int32
	denied bool
	typ    string
}

func runSandboxed(t *testing.T, sess *Session, cwd string, policy map[string]any, env map[string]string, argv ...string) sandboxRun {
	t.Helper()
	if env == nil {
		env = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin"}
	}
	id := fmt.Sprintf("sb-%d", newID())
	res, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: argv, Cwd: cwd, Env: env, Sandbox: policy})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	proc := sess.lookup(id).proc
	evs := collect(t, proc)
	r := sandboxRun{out: output(evs, ""), typ: res.SandboxType}
	for _, e := range evs {
		if e.Kind == engine.EventExited {
			r.code, r.denied = e.ExitCode, e.SandboxDenied
		}
	}
	return r
}

func requireSandbox(t *testing.T) {
	t.Helper()
	caps := sandbox.Probe()
	if caps.LandlockABI == 0 || !caps.Seccomp {
		testdeps.Missing(t, "sandbox", "this machine cannot enforce the sandbox: %v", caps.Report())
	}
}

// dirOutsideTmp returns a fresh directory that is not under /tmp or
// $TMPDIR, which workspace-write leaves writable.
func dirOutsideTmp(t *testing.T) string {
	t.Helper()
	base := "/var/tmp"
	if os.Getenv("TMPDIR") == base {
		t.Skip("TMPDIR is /var/tmp")
	}
	d, err := os.MkdirTemp(base, "outpost-sandbox-test")
	if err != nil {
		t.Fatalf("no directory outside the temp dirs: %v", err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

func TestSandboxWorkspaceWriteConfinesWritesAndFlagsTheDenial(t *testing.T) {
	requireSandbox(t)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd, outside := dirOutsideTmp(t), dirOutsideTmp(t)
	ws := map[string]any{"mode": "workspace-write"}
	r := runSandboxed(t, sess, cwd, ws, nil, "/bin/sh", "-c", "echo inside > inside.txt && cat inside.txt")
	if r.code != 0 || r.out != "inside\n" || r.typ != sandbox.TypeLinux {
		t.Fatalf("write inside the workspace: %+v", r)
	}
	r = runSandboxed(t, sess, cwd, ws, nil, "/bin/sh", "-c", "echo before; echo x > "+outside+"/escape.txt")
	if r.code == 0 || !r.denied || !strings.Contains(r.out, "before") || !strings.Contains(strings.ToLower(r.out), "permission denied") {
		t.Fatalf("write outside the workspace: %+v (output must be kept and the denial flagged)", r)
	}
	if _, err := os.Stat(filepath.Join(outside, "escape.txt")); err == nil {
		t.Fatal("the file outside the workspace was written")
	}
}

func TestSandboxSymlinkAndDotDotEscapesAreDenied(t *testing.T) {
	requireSandbox(t)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd, outside := dirOutsideTmp(t), dirOutsideTmp(t)
	os.Symlink(outside, filepath.Join(cwd, "link"))
	ws := map[string]any{"mode": "workspace-write"}
	for _, target := range []string{"link/via-symlink.txt", "../" + filepath.Base(outside) + "/via-dotdot.txt"} {
		r := runSandboxed(t, sess, cwd, ws, nil, "/bin/sh", "-c", "echo x > "+target)
		if r.code == 0 || !r.denied {
			t.Errorf("%s: %+v", target, r)
		}
	}
	entries, _ := os.ReadDir(outside)
	if len(entries) != 0 {
		t.Fatalf("escaped writes landed outside: %v", entries)
	}
}

func TestSandboxProtectsGitInsideTheWorkspace(t *testing.T) {
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces: protected sub-paths are reported as not enforced")
	}
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, ".git"), 0o755)
	os.WriteFile(filepath.Join(cwd, ".git", "config"), []byte("[core]\n"), 0o644)
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "workspace-write"}, nil, "/bin/sh", "-c", "echo ok > src.txt && cat .git/config && echo hacked >> .git/config")
	if r.code == 0 || !strings.Contains(r.out, "[core]") {
		t.Fatalf("%+v", r)
	}
	b, _ := os.ReadFile(filepath.Join(cwd, ".git", "config"))
	if string(b) != "[core]\n" {
		t.Fatalf(".git/config was modified: %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(cwd, "src.txt")); string(b) != "ok\n" {
		t.Fatal("the workspace itself was not writable")
	}
}

func TestSandboxReadOnlyDeniesEveryWrite(t *testing.T) {
	requireSandbox(t)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "read-only"}, nil, "/bin/sh", "-c", "cat /etc/hostname >/dev/null && echo read-ok && echo x > f.txt")
	if r.code == 0 || !strings.Contains(r.out, "read-ok") || !r.denied {
		t.Fatalf("%+v", r)
	}
}

func TestSandboxNetworkOffDeniesTCPAndOnAllowsIt(t *testing.T) {
	requireSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	_, sess := newTestSession(t, engine.NewLocalBackend())
	self, _ := os.Executable()
	env := map[string]string{"OUTPOST_TEST_DIAL": ln.Addr().String()}
	cwd := t.TempDir()
	// The probe binary lives in the build's temp dir: make it readable.
	policy := func(network bool) map[string]any {
		return map[string]any{"mode": "workspace-write", "network": network, "writableRoots": []string{filepath.Dir(self)}}
	}
	r := runSandboxed(t, sess, cwd, policy(false), env, self)
	if r.code == 0 || !strings.Contains(r.out, "operation not permitted") {
		t.Fatalf("network off: %+v", r)
	}
	r = runSandboxed(t, sess, cwd, policy(true), env, self)
	if r.code != 0 || !strings.Contains(r.out, "ok") {
		t.Fatalf("network on: %+v", r)
	}
}

func TestSandboxThatCannotBeEnforcedIsRefusedNotIgnored(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SandboxCaps = func() sandbox.Capabilities {
		return sandbox.Capabilities{OS: "linux", Seccomp: true, LandlockABI: 0}
	}
	cfg.DefaultCwd = t.TempDir()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := srv.newSession()
	_, err = sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"true"}, Sandbox: map[string]any{"mode": "workspace-write"}})
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidRequest || !strings.HasPrefix(pe.Message, "sandbox cannot be enforced on this executor: ") {
		t.Fatalf("err = %v", err)
	}
	_, err = sess.Start(context.Background(), protocol.ExecParams{ProcessID: "q", Argv: []string{"true"}, Sandbox: map[string]any{"mode": "nonsense"}})
	if !errors.As(err, &pe) || pe.Code != protocol.CodeInvalidParams {
		t.Fatalf("bad policy: %v", err)
	}
}

func TestSandboxedRootCannotUnmountTheProtection(t *testing.T) {
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces")
	}
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	os.Mkdir(filepath.Join(cwd, ".git"), 0o755)
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "workspace-write"}, nil, "/bin/sh", "-c", "umount .git 2>&1; echo x > .git/f")
	if r.code == 0 {
		t.Fatalf("the protection was undone: %+v", r)
	}
	if _, err := os.Stat(filepath.Join(cwd, ".git", "f")); err == nil {
		t.Fatal(".git was written")
	}
}

func TestSandboxNoneEntryHidesAPath(t *testing.T) {
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces")
	}
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	secret := filepath.Join(cwd, "secret")
	os.Mkdir(secret, 0o755)
	os.WriteFile(filepath.Join(secret, "key"), []byte("hunter2"), 0o644)
	policy := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": ":cwd", "access": "write"}, {"path": secret, "access": "none"}}}
	r := runSandboxed(t, sess, cwd, policy, nil, "/bin/sh", "-c", "cat secret/key; echo done")
	if strings.Contains(r.out, "hunter2") || !strings.Contains(r.out, "done") {
		t.Fatalf("%+v", r)
	}
}

func TestSandboxNetworkOffDeniesEveryIPOperationButUnixSockets(t *testing.T) {
	requireSandbox(t)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	self, _ := os.Executable()
	cwd := t.TempDir()
	policy := map[string]any{"mode": "workspace-write", "writableRoots": []string{filepath.Dir(self)}}
	for mode, wantOK := range map[string]bool{"udp": false, "listen": false, "resolve": false, "unixpair": true} {
		env := map[string]string{"OUTPOST_TEST_DIAL": "127.0.0.1:9", "OUTPOST_TEST_NET": mode}
		r := runSandboxed(t, sess, cwd, policy, env, self)
		if ok := r.code == 0; ok != wantOK || !wantOK && !strings.Contains(r.out, "operation not permitted") {
			t.Errorf("%s with network off: %+v, want ok=%v (denied with EPERM)", mode, r, wantOK)
		}
	}
}

func TestSandboxedProcessHasNoNewPrivsAndMarkers(t *testing.T) {
	requireSandbox(t)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "read-only"}, nil, "/bin/sh", "-c", "grep NoNewPrivs /proc/self/status; echo $OUTPOST_SANDBOX $OUTPOST_SANDBOX_NETWORK_DISABLED; echo x > /dev/null && echo devnull-ok; ulimit -c")
	for _, want := range []string{"NoNewPrivs:\t1", "linuxSeccomp 1", "devnull-ok", "\n0\n"} {
		if !strings.Contains(r.out, strings.ReplaceAll(strings.ReplaceAll(want, "\\t", "\t"), "\\n", "\n")) {
			t.Errorf("output %q lacks %q", r.out, want)
		}
	}
}

func TestSandboxWorkspaceWriteAllowsTmpAndRefusesReplacingGit(t *testing.T) {
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces")
	}
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := dirOutsideTmp(t)
	os.Mkdir(filepath.Join(cwd, ".git"), 0o755)
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "workspace-write"}, nil, "/bin/sh", "-c", "f=$(mktemp /tmp/outpost-sb-XXXXXX) && echo tmp-ok && rm $f; rm -rf .git 2>&1; mv .git moved 2>&1; ln -s /tmp .git 2>&1; test -d .git && ! test -L .git && echo git-intact")
	if !strings.Contains(r.out, "tmp-ok") || !strings.Contains(r.out, "git-intact") {
		t.Fatalf("%+v", r)
	}
	if fi, err := os.Lstat(filepath.Join(cwd, ".git")); err != nil || !fi.IsDir() {
		t.Fatal(".git was replaced")
	}
}

func TestFullAccessRunsUnwrapped(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	r := runSandboxed(t, sess, t.TempDir(), map[string]any{"mode": "full-access"}, nil, "/bin/sh", "-c", "grep NoNewPrivs /proc/self/status")
	if r.typ != sandbox.TypeNone || !strings.Contains(r.out, "NoNewPrivs:\t0") {
		t.Fatalf("%+v", r)
	}
}

func TestPathMappingTranslatesCwd(t *testing.T) {
	real := t.TempDir()
	cfg := DefaultConfig()
	cfg.DefaultCwd = t.TempDir()
	cfg.PathMappings = []pathmap.Mapping{{Client: "/workspace", Executor: real}}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, _ := srv.newSession()
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p", Argv: []string{"pwd"}, Cwd: "file:///workspace", Env: map[string]string{"PATH": "/bin:/usr/bin"}}); err != nil {
		t.Fatal(err)
	}
	got := output(collect(t, sess.lookup("p").proc), "")
	want, _ := filepath.EvalSymlinks(real)
	if strings.TrimSpace(got) != want {
		t.Fatalf("pwd %q, want %q", got, want)
	}
}

func TestSandboxPIDNamespaceHidesOtherProcessesAndKeepsSignals(t *testing.T) {
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces")
	}
	_, sess := newTestSession(t, engine.NewLocalBackend())
	cwd := t.TempDir()
	r := runSandboxed(t, sess, cwd, map[string]any{"mode": "read-only"}, nil, "/bin/sh", "-c", "ls /proc | grep -c '^[0-9]'")
	if n := strings.TrimSpace(r.out); n == "" || len(n) > 1 {
		t.Fatalf("the sandbox sees %q processes; want a handful of its own", r.out)
	}
	id := fmt.Sprintf("sig-%d", newID())
	policy := map[string]any{"mode": "read-only"}
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", `trap 'echo signal:2; exit 7' INT; echo ready; while :; do sleep 0.01; done`}, Cwd: cwd, Env: map[string]string{"PATH": "/usr/bin:/bin"}, Sandbox: policy}); err != nil {
		t.Fatal(err)
	}
	proc := sess.lookup(id).proc
	waitOutput(t, proc, "ready")
	if err := proc.Signal(protocol.SignalInterrupt); err != nil {
		t.Fatal(err)
	}
	evs := collect(t, proc)
	if !strings.Contains(output(evs, ""), "signal:2") || exitCode(t, evs) != 7 {
		t.Fatalf("interrupt in the sandbox: %s", summarize(evs))
	}
	id = fmt.Sprintf("term-%d", newID())
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "echo ready; exec sleep 60"}, Cwd: cwd, Env: map[string]string{"PATH": "/usr/bin:/bin"}, Sandbox: policy}); err != nil {
		t.Fatal(err)
	}
	proc = sess.lookup(id).proc
	// A TERM that arrives while the helper is still setting up is lost
	// (the namespace's init ignores it) and the KILL after the grace
	// does the job; once the command runs, TERM reaches it.
	waitOutput(t, proc, "ready")
	proc.Terminate()
	if code := exitCode(t, collect(t, proc)); code != 128+15 {
		t.Fatalf("terminated sandboxed sleep exited %d, want 143", code)
	}
}

// The dedicated helper binary of this build runs sandboxed commands with
// every restriction; one of another build is refused and nothing changes.
func TestDedicatedSandboxHelperOfThisBuildIsUsedAndOthersRefused(t *testing.T) {
	requireSandbox(t)
	before := sandbox.HelperPath()
	t.Cleanup(func() { sandbox.SetHelperBinary(before) })
	dir := t.TempDir()
	bin := filepath.Join(dir, "outpost-sandbox")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/outpost-exec/outpost/cmd/outpost-sandbox").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, other := range []string{"/bin/echo", filepath.Join(dir, "missing")} {
		if err := sandbox.UseHelper(other); err == nil {
			t.Fatalf("%s was accepted as the helper", other)
		}
		if sandbox.HelperPath() != before {
			t.Fatalf("a refused helper changed the helper path to %s", sandbox.HelperPath())
		}
	}
	if err := sandbox.UseHelper(bin); err != nil {
		t.Fatal(err)
	}
	if p := sandbox.HelperPath(); !strings.HasPrefix(p, "/proc/self/fd/") {
		t.Fatalf("helper path %s, want the pinned descriptor", p)
	}
	// Replacing the file on disk changes nothing: the descriptor is pinned.
	os.Rename(bin, bin+".old")
	os.WriteFile(bin, []byte("#!/bin/sh\necho impostor\n"), 0o755)
	_, sess := newTestSession(t, engine.NewLocalBackend())
	r := runSandboxed(t, sess, t.TempDir(), map[string]any{"mode": "read-only"}, nil, "/bin/sh", "-c", "grep NoNewPrivs /proc/self/status; echo x > /etc/outpost-test && echo wrote")
	if !strings.Contains(r.out, "NoNewPrivs:\t1") || strings.Contains(r.out, "wrote") || strings.Contains(r.out, "impostor") || r.code == 0 {
		t.Fatalf("through the dedicated helper: %+v", r)
	}
}
