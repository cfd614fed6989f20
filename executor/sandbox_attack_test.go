//go:build linux

package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/zap/zaptest"
	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// The attacks of the issue "Sandboxes that hold when the executor runs as
// root", each tried by a real sandboxed command. They run as whoever runs
// the tests; TestSandboxAttacksAsUnprivilegedUser runs them again as an
// ordinary user when the tests run as root.

// unprivEnv marks a test binary re-run as an unprivileged user.
const unprivEnv = "OUTPOST_TEST_UNPRIVILEGED"

func newAttackSession(t *testing.T, hidden ...string) *Session {
	t.Helper()
	cfg := DefaultConfig()
	cfg.Logger = zaptest.NewLogger(t)
	cfg.DefaultCwd = t.TempDir()
	cfg.SandboxHidden = append(cfg.SandboxHidden, hidden...)
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := srv.newSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	// The attacks meet pre-started helpers, as commands do on a running
	// executor (an executor's first commands, and a burst past the pool,
	// start theirs as the other tests here do).
	if b, ok := cfg.Backend.(*engine.LocalBackend); ok && sandbox.Probe().MountNamespaces {
		b.WarmSandbox(srv.cfg.SandboxUser)
		waitPoolFull(t, b)
	}
	return sess
}

func requireUserNamespaces(t *testing.T) {
	t.Helper()
	requireSandbox(t)
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "this machine allows no user namespaces")
	}
}

var workspaceWrite = map[string]any{"mode": "workspace-write"}

func sh(t *testing.T, sess *Session, cwd string, policy map[string]any, script string) sandboxRun {
	t.Helper()
	return runSandboxed(t, sess, cwd, policy, nil, "/bin/sh", "-c", script)
}

func TestSandboxedCommandIsNeverHostRoot(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("as root only: a non-root executor's commands run as itself")
	}
	sess := newAttackSession(t)
	ws := t.TempDir()
	r := sh(t, sess, ws, workspaceWrite, "cat /proc/self/uid_map; id -u; echo made > made.txt && echo wrote")
	if r.code != 0 || !strings.Contains(r.out, "wrote") {
		t.Fatalf("workspace not writable: %+v", r)
	}
	fields := strings.Fields(r.out)
	if len(fields) < 3 || fields[0] != "0" || fields[1] != "65534" {
		t.Fatalf("uid_map %q: the command must be 65534 on the host", r.out)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(filepath.Join(ws, "made.txt"), &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("a file made in root's workspace must land as root's: %+v %v", st, err)
	}
	// A workspace of another owner: what the command makes is that owner's.
	other := t.TempDir()
	os.Chown(other, 4242, 4343)
	r = sh(t, sess, other, workspaceWrite, "echo x > f && mkdir d && echo ok")
	if r.code != 0 {
		t.Fatalf("%+v", r)
	}
	for _, n := range []string{"f", "d"} {
		if err := syscall.Stat(filepath.Join(other, n), &st); err != nil || st.Uid != 4242 || st.Gid != 4343 {
			t.Fatalf("%s: owner %d:%d, want 4242:4343 (%v)", n, st.Uid, st.Gid, err)
		}
	}
}

func TestSandboxCannotReadRootOnlyFilesOrReachRootOnlySockets(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	secretDir := dirOutsideTmp(t)
	secret := filepath.Join(secretDir, "key")
	os.WriteFile(secret, []byte("SECRET-KEY"), 0o600)
	sock := filepath.Join(secretDir, "daemon.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o600)
	go acceptHello(ln)
	ws := t.TempDir()
	for _, network := range []bool{false, true} {
		pol := map[string]any{"mode": "workspace-write", "network": network}
		r := sh(t, sess, ws, pol, "cat "+secret)
		if strings.Contains(r.out, "SECRET-KEY") {
			t.Fatalf("network %v: the sandbox read a root-only file: %q", network, r.out)
		}
		r = runSandboxed(t, sess, ws, pol, map[string]string{"OUTPOST_TEST_DIAL": sock, "OUTPOST_TEST_NET": "unix"}, probeBinary(t))
		if strings.Contains(r.out, "unix ok") {
			t.Fatalf("network %v: the sandbox reached a root-only socket: %+v", network, r)
		}
	}
	// Without a sandbox the same command reaches both: the test is real.
	if b, err := os.ReadFile(secret); err != nil || string(b) != "SECRET-KEY" {
		t.Fatal(err)
	}
}

func acceptHello(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		c.Write([]byte("HELLO\n"))
		c.Close()
	}
}

// The socket probes run this test binary in the sandbox (netProbe, mode
// "unix"): a real connect(2) to a pathname socket.
func TestSandboxNetworkOffReachesNoUnixSocketOutsideItsWritableRoots(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	outside := dirOutsideTmp(t)
	os.Chmod(outside, 0o755)
	sock := filepath.Join(outside, "world.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777) // anyone may connect: only the sandbox stops it
	go acceptHello(ln)
	ws := shortTempDir(t)
	inside := filepath.Join(ws, "own.sock")
	lnIn, err := net.Listen("unix", inside)
	if err != nil {
		t.Fatal(err)
	}
	defer lnIn.Close()
	go acceptHello(lnIn)
	probe := func(network bool, path string) sandboxRun {
		return runSandboxed(t, sess, ws, map[string]any{"mode": "workspace-write", "network": network},
			map[string]string{"OUTPOST_TEST_DIAL": path, "OUTPOST_TEST_NET": "unix"}, probeBinary(t))
	}
	if r := probe(false, sock); strings.Contains(r.out, "unix ok") {
		t.Fatalf("network off reached a socket outside the writable roots: %+v", r)
	}
	if r := probe(false, inside); !strings.Contains(r.out, "unix ok") {
		t.Fatalf("network off must keep sockets inside the writable roots: %+v", r)
	}
	if r := probe(true, sock); !strings.Contains(r.out, "unix ok") {
		t.Fatalf("network on must keep today's behaviour: %+v", r)
	}
}

func TestSandboxHidesTheExecutorsSecretsWhateverThePolicy(t *testing.T) {
	requireUserNamespaces(t)
	ws := shortTempDir(t)
	// The state directory inside the workspace: only the hiding keeps it
	// out of reach, not file permissions.
	state := filepath.Join(ws, "state")
	os.Mkdir(state, 0o755)
	os.WriteFile(filepath.Join(state, "executor.key"), []byte("EXECUTOR-KEY"), 0o644)
	sockDir := filepath.Join(ws, "run")
	os.Mkdir(sockDir, 0o755)
	sock := filepath.Join(sockDir, "outpost.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(sock, 0o777)
	go acceptHello(ln)
	sess := newAttackSession(t, state, sock)
	// (full-access is no sandbox at all: the client chose to run as the
	// executor.) An entries policy that writes everywhere is still one.
	everywhere := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "write"}}}
	for _, pol := range []map[string]any{{"mode": "read-only"}, workspaceWrite, {"mode": "workspace-write", "network": true}, everywhere} {
		r := sh(t, sess, ws, pol, "cat state/executor.key 2>/dev/null; ls state 2>/dev/null; echo x > state/new")
		if strings.Contains(r.out, "EXECUTOR-KEY") || strings.Contains(r.out, "executor.key") {
			t.Fatalf("%v: the executor's state is visible: %q", pol, r.out)
		}
		r = runSandboxed(t, sess, ws, pol, map[string]string{"OUTPOST_TEST_DIAL": sock, "OUTPOST_TEST_NET": "unix"}, probeBinary(t))
		if strings.Contains(r.out, "unix ok") {
			t.Fatalf("%v: the executor's socket is reachable: %+v", pol, r)
		}
	}
	if _, err := os.Stat(filepath.Join(state, "new")); err == nil {
		t.Fatal("a sandbox wrote into the executor's state")
	}
	// fs/* judged by a policy: hidden too.
	_, err = sess.files.ReadFile(protocol.FsReadFileParams{Path: filepath.Join(state, "executor.key"), Sandbox: map[string]any{"mode": "workspace-write", "cwd": ws}})
	if err == nil {
		t.Fatal("fs/readFile under a policy read the executor's key")
	}
}

func TestSandboxProtectsNamesAtAnyDepthSymlinkedAndAbsent(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "sub", "vendor", ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "vendor", ".git", "config"), []byte("[core]\n"), 0o644)
	real := filepath.Join(ws, "real-git")
	os.Mkdir(real, 0o755)
	os.WriteFile(filepath.Join(real, "config"), []byte("[core]\n"), 0o644)
	os.Mkdir(filepath.Join(ws, "lib"), 0o755)
	os.Symlink(real, filepath.Join(ws, "lib", ".git"))
	os.MkdirAll(filepath.Join(ws, "a", ".codex"), 0o755)
	script := `
echo '[core] fsmonitor = evil' >> sub/vendor/.git/config && echo NESTED-WRITTEN
mkdir sub/vendor/.git/hooks && echo NESTED-MKDIR
echo evil >> lib/.git/config && echo LINK-TARGET-WRITTEN
rm -f lib/.git && echo LINK-REMOVED
ln -sfn /tmp lib/.git && echo LINK-REPLACED
mv lib/.git lib/old && echo LINK-MOVED
touch a/.codex/config.toml && echo DEEP-CODEX
mkdir .codex && echo TOP-CODEX-CREATED
mkdir .git && echo TOP-GIT-CREATED
echo x > .agents && echo TOP-AGENTS-CREATED
ln -s /tmp .outpost && echo TOP-OUTPOST-CREATED
echo fine > ordinary.txt && echo ORDINARY-OK
`
	r := sh(t, sess, ws, workspaceWrite, script)
	for _, bad := range []string{"NESTED-WRITTEN", "NESTED-MKDIR", "LINK-TARGET-WRITTEN", "LINK-REMOVED", "LINK-REPLACED", "LINK-MOVED",
		"DEEP-CODEX", "TOP-CODEX-CREATED", "TOP-GIT-CREATED", "TOP-AGENTS-CREATED", "TOP-OUTPOST-CREATED"} {
		if strings.Contains(r.out, bad) {
			t.Errorf("%s: %q", bad, r.out)
		}
	}
	if !strings.Contains(r.out, "ORDINARY-OK") {
		t.Fatalf("the workspace must stay writable: %q", r.out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", "vendor", ".git", "config")); string(b) != "[core]\n" {
		t.Errorf("nested .git/config changed: %q", b)
	}
	if l, err := os.Readlink(filepath.Join(ws, "lib", ".git")); err != nil || l != real {
		t.Errorf("the .git symlink changed: %q %v", l, err)
	}
	// The placeholders that held the absent names are gone afterwards:
	// once the helper's namespaces are (a pooled helper reports the exit
	// just before its own).
	deadline := time.Now().Add(testTimeout)
	for _, n := range []string{".codex", ".git", ".agents", ".outpost"} {
		for {
			_, err := os.Lstat(filepath.Join(ws, n))
			if err != nil {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("%s exists in the workspace after the command", n)
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func TestSandboxWorkspaceCannotBeRenamedAwayAndRebuilt(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	parent := t.TempDir() // under /tmp, which workspace-write leaves writable
	os.Chmod(parent, 0o777)
	ws := filepath.Join(parent, "ws")
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644)
	script := fmt.Sprintf(`mv %[1]s %[1]s.away && echo MOVED
mkdir -p %[1]s/.git && echo '[core] fsmonitor = evil' > %[1]s/.git/config && echo REBUILT
mv %[2]s %[2]s.away && echo PARENT-MOVED`, ws, parent)
	r := sh(t, sess, ws, workspaceWrite, script)
	if strings.Contains(r.out, "MOVED") || strings.Contains(r.out, "REBUILT") {
		t.Fatalf("the workspace was renamed away or rebuilt: %q", r.out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf(".git/config changed: %q", b)
	}
	for _, p := range []string{ws + ".away", parent + ".away"} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s exists on the host", p)
		}
	}
}

func TestSandboxCannotLeaveASetUIDProgramBehind(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("as root only: files of a non-root executor's commands are its own")
	}
	sess := newAttackSession(t)
	ws := t.TempDir()
	r := sh(t, sess, ws, workspaceWrite, "cp /bin/true ./t && chmod u+s ./t; chmod g+s ./t; install -m 4755 /bin/true ./u; ls -l; echo done")
	if !strings.Contains(r.out, "done") {
		t.Fatalf("%+v", r)
	}
	for _, n := range []string{"t", "u"} {
		if fi, err := os.Stat(filepath.Join(ws, n)); err == nil && fi.Mode()&(os.ModeSetuid|os.ModeSetgid) != 0 {
			t.Fatalf("%s is %v on disk, owned by root", n, fi.Mode())
		}
	}
}

// TestSandboxAttacksAsUnprivilegedUser re-runs the attacks above as an
// ordinary user (uid 4242) when the tests run as root: a non-root
// executor's sandbox must hold too.
func TestSandboxAttacksAsUnprivilegedUser(t *testing.T) {
	if os.Getenv(unprivEnv) != "" {
		t.Skip("already unprivileged")
	}
	if os.Geteuid() != 0 {
		t.Skip("the tests already run unprivileged")
	}
	requireUserNamespaces(t)
	dir, err := os.MkdirTemp("", "u") // short: socket paths have 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "executor.test")
	if err := copyExecutable(os.Args[0], bin); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(dir, "h")
	os.Mkdir(home, 0o700)
	os.Chown(home, 4242, 4242)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "-test.run", "^(TestSandboxNetworkOffReachesNoUnixSocketOutsideItsWritableRoots|TestSandboxHidesTheExecutorsSecretsWhateverThePolicy|TestSandboxProtectsNamesAtAnyDepthSymlinkedAndAbsent|TestSandboxWorkspaceCannotBeRenamedAwayAndRebuilt|TestSandboxPoolBehavesAsAFreshHelper|TestSandboxPoolDiesWithACrashedExecutor|TestSandboxNetworkOffSurvivesASocketFlood)$", "-test.v", "-test.count=1")
	cmd.Env = []string{unprivEnv + "=1", "HOME=" + home, "PATH=/usr/local/bin:/usr/bin:/bin", "TMPDIR=" + home}
	cmd.Dir = home
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 4242, Gid: 4242, Groups: []uint32{}}}
	out, err := cmd.CombinedOutput()
	t.Logf("as uid 4242:\n%s", out)
	if err != nil {
		t.Fatalf("the attacks succeeded against a non-root executor (or the run failed): %v", err)
	}
	if strings.Contains(string(out), "--- SKIP") || !strings.Contains(string(out), "--- PASS") {
		t.Fatal("the unprivileged run skipped tests: it must run them")
	}
}

// shortTempDir is a temporary directory with a short path, for sockets.
func shortTempDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "w")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

var probeOnce struct {
	sync.Once
	path string
	err  error
}

// probeBinary is this test binary where a sandboxed command of any user
// can run it (the build directory is private to the user who built it).
func probeBinary(t *testing.T) string {
	t.Helper()
	probeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "outpost-probe-")
		if err != nil {
			probeOnce.err = err
			return
		}
		os.Chmod(dir, 0o755)
		probeOnce.path = filepath.Join(dir, "probe.test")
		probeOnce.err = copyExecutable(os.Args[0], probeOnce.path)
	})
	if probeOnce.err != nil {
		t.Fatal(probeOnce.err)
	}
	return probeOnce.path
}

func copyExecutable(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Found by red-teaming the first version: directories between /tmp and a
// workspace were ID-mapped along with it, handing the command a 0700
// directory of root's (and the secrets beside the checkout).
func TestSandboxDirectoriesAboveAWorkspaceStayTheirOwners(t *testing.T) {
	requireUserNamespaces(t)
	if os.Geteuid() != 0 {
		t.Skip("as root only")
	}
	sess := newAttackSession(t)
	priv := t.TempDir()
	os.Chmod(priv, 0o700) // root's, private
	os.WriteFile(filepath.Join(priv, "id_ed25519"), []byte("ROOT-PRIVATE-KEY"), 0o600)
	ws := filepath.Join(priv, "checkout", "ws")
	os.MkdirAll(ws, 0o755)
	r := sh(t, sess, ws, workspaceWrite, "cat "+priv+"/id_ed25519; chmod 777 "+priv+"; echo x > "+priv+"/dropped; echo x > ../sibling; echo ok > mine && echo WS-OK")
	if strings.Contains(r.out, "ROOT-PRIVATE-KEY") || !strings.Contains(r.out, "WS-OK") {
		t.Fatalf("%q", r.out)
	}
	if fi, _ := os.Stat(priv); fi.Mode().Perm() != 0o700 {
		t.Fatalf("the directory above the workspace is now %v", fi.Mode())
	}
	for _, p := range []string{filepath.Join(priv, "dropped"), filepath.Join(priv, "checkout", "sibling")} {
		if _, err := os.Stat(p); err == nil {
			t.Fatalf("%s was written", p)
		}
	}
}

// A command plants ws/docs → a directory of root's; a later request names
// ws/docs as its cwd. The workspace must be named by its real path.
func TestSandboxRefusesAWorkspaceNamedThroughASymlink(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	sys := dirOutsideTmp(t)
	os.WriteFile(filepath.Join(sys, "shadow"), []byte("SHADOW"), 0o600)
	ws := t.TempDir()
	sh(t, sess, ws, workspaceWrite, "ln -s "+sys+" docs")
	for _, pol := range []map[string]any{workspaceWrite, {"mode": "read-only"}} {
		_, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: fmt.Sprintf("p-%d", newID()), Argv: []string{"/bin/cat", "shadow"},
			Cwd: filepath.Join(ws, "docs"), Env: map[string]string{}, Sandbox: pol})
		if !errors.Is(err, sandbox.ErrSymlinkedWorkspace) && (err == nil || !strings.Contains(err.Error(), "crosses the symlink")) {
			t.Fatalf("%v: a cwd through a planted symlink: %v", pol, err)
		}
	}
}

// A descriptor the executor holds without close-on-exec never reaches a
// sandboxed command.
func TestSandboxedCommandInheritsNoDescriptorButItsStdio(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	secret := filepath.Join(dirOutsideTmp(t), "secret")
	os.WriteFile(secret, []byte("SECRET-BY-FD"), 0o600)
	fd, err := unix.Open(secret, unix.O_RDONLY, 0) // no O_CLOEXEC: leaks into every child
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if err := unix.Dup2(fd, 200); err != nil {
		t.Fatal(err)
	}
	defer unix.Close(200)
	r := sh(t, sess, t.TempDir(), workspaceWrite, "cat /dev/fd/200 2>/dev/null; ls /proc/self/fd")
	if strings.Contains(r.out, "SECRET-BY-FD") {
		t.Fatalf("the command read an inherited descriptor: %q", r.out)
	}
	if fds := strings.Fields(r.out); len(fds) > 4 { // 0 1 2 and ls's own
		t.Fatalf("descriptors open in the command: %q", r.out)
	}
}

// A nested .git cannot be replaced by moving the directory above it away
// and rebuilding it.
func TestSandboxNestedGitCannotBeReplacedByRenamingItsParent(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	ws := t.TempDir()
	os.MkdirAll(filepath.Join(ws, "sub", "vendor", ".git"), 0o755)
	os.WriteFile(filepath.Join(ws, "sub", "vendor", ".git", "config"), []byte("[core]\n"), 0o644)
	r := sh(t, sess, ws, workspaceWrite, `mv sub/vendor sub/vendor.old && echo MOVED; mv sub sub.old && echo MOVED-SUB
mkdir -p sub/vendor/.git && printf '[core]\n\tfsmonitor = evil\n' > sub/vendor/.git/config && echo REBUILT`)
	if strings.Contains(r.out, "MOVED") || strings.Contains(r.out, "REBUILT") {
		t.Fatalf("%q", r.out)
	}
	if b, _ := os.ReadFile(filepath.Join(ws, "sub", "vendor", ".git", "config")); string(b) != "[core]\n" {
		t.Fatalf("nested .git/config is now %q", b)
	}
}

// More pathname sockets than the helper covers one by one (a command can
// bind thousands in its own workspace): a network-off command elsewhere
// still starts, and reaches none of them — their directory is hidden
// whole — nor any other socket outside its writable roots. Found by a
// red-team review: such a flood used to refuse every network-off start.
func TestSandboxNetworkOffSurvivesASocketFlood(t *testing.T) {
	requireUserNamespaces(t)
	sess := newAttackSession(t)
	flood := dirOutsideTmp(t)
	os.Chmod(flood, 0o755)
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	for i := range maxHiddenSocketsForTest + 200 {
		p := filepath.Join(flood, fmt.Sprintf("s%d", i))
		ln, err := net.Listen("unix", p)
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(p, 0o777)
		lns = append(lns, ln)
	}
	go acceptHello(lns[7])
	other := dirOutsideTmp(t)
	os.Chmod(other, 0o755)
	world := filepath.Join(other, "world.sock")
	ln, err := net.Listen("unix", world)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	os.Chmod(world, 0o777)
	go acceptHello(ln)
	ws := shortTempDir(t)
	for _, target := range []string{filepath.Join(flood, "s7"), world} {
		r := runSandboxed(t, sess, ws, map[string]any{"mode": "workspace-write"},
			map[string]string{"OUTPOST_TEST_DIAL": target, "OUTPOST_TEST_NET": "unix"}, probeBinary(t))
		if !strings.Contains(r.out, "unix failed") {
			t.Fatalf("%s: the probe must run and fail to connect: %+v", target, r)
		}
	}
}

// maxHiddenSocketsForTest is the sandbox's bound on sockets covered one by
// one (sandbox.maxHiddenSockets).
const maxHiddenSocketsForTest = 4096
