//go:build linux

package mcpserver

// Red-team tests: each plays a hostile model (the tool caller) or a web
// page talking to the local HTTP port, tries to break one of the package's
// promises, and asserts the promise holds. An attack that succeeded keeps
// its test, skipped with "REDTEAM FINDING: …" at the top until it is fixed.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// finding marks a test whose attack succeeded: it skips, with the
// finding, unless OUTPOST_REDTEAM_FINDINGS=1 (to see whether a fix holds).
func finding(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("OUTPOST_REDTEAM_FINDINGS") != "1" {
		t.Skip(msg)
	}
}

// openOutside is a directory outside the workspace and the temp dirs that
// anyone may write: only the sandbox stands between a command (run as an
// unprivileged id when the tests are root) and it.
func openOutside(t *testing.T) string {
	t.Helper()
	d := dirOutsideTmp(t)
	if err := os.Chmod(d, 0o777); err != nil {
		t.Fatal(err)
	}
	return d
}

// wsOutsideTmp is a workspace outside the temp dirs (so that a write the
// sandbox lets through to /tmp is not mistaken for one to the workspace),
// searchable by the sandbox's unprivileged id.
func wsOutsideTmp(t *testing.T) string {
	t.Helper()
	d := dirOutsideTmp(t)
	os.Chmod(d, 0o755)
	return d
}

// entries lists what dir holds (names), failing on an error.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

func (h *harness) runOut(args map[string]any) runResult {
	h.t.Helper()
	var out runResult
	h.ok("run", args, &out)
	return out
}

func decode(t *testing.T, res *mcp.CallToolResult, out any) {
	t.Helper()
	b, _ := json.Marshal(res.StructuredContent)
	if err := json.Unmarshal(b, out); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
}

// uniqueSleep is a sleep argument no other process has, to find the
// command on the host (its pid inside the sandbox's namespace is not).
func uniqueSleep() string {
	return fmt.Sprintf("%d.%06d", 400+time.Now().UnixNano()%1000, time.Now().UnixNano()/1000%1000000)
}

// --- writing outside the workspace -----------------------------------------

// The model plants symlinks with run (the workspace is its to write), then
// names them in write_file and edit_file: a link to a file outside, a link
// to a directory outside, a new path below that directory with
// create_dirs, and relative paths that climb out with "..".
func TestRedteamFileToolsDoNotWriteThroughPlantedSymlinks(t *testing.T) {
	requireSandbox(t)
	ws, out := wsOutsideTmp(t), openOutside(t)
	h := newHarness(t, func(c *Config) { c.Workspace = ws })
	victim := filepath.Join(out, "victim")
	if err := os.WriteFile(victim, []byte("old\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	plant := h.runOut(map[string]any{"shell": fmt.Sprintf("ln -s %s fl && ln -s %s dl && ln -s ../../../../../../..%s rel && mkdir sub && ln -s %s sub/up", victim, out, out, out)})
	if plant.ExitCode != 0 {
		t.Fatalf("planting: %+v", plant)
	}
	rel, _ := filepath.Rel(ws, out)
	for _, c := range []struct {
		tool string
		args map[string]any
	}{
		{"write_file", map[string]any{"path": "fl", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "dl/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "dl/victim", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "dl/deep/er/new", "content": "pwned\n", "create_dirs": true}},
		{"write_file", map[string]any{"path": "rel/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "sub/up/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "sub/../dl/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": rel + "/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": "sub/../../" + filepath.Base(out) + "/new", "content": "pwned\n"}},
		{"write_file", map[string]any{"path": out + "/new", "content": "pwned\n"}},
		{"edit_file", map[string]any{"path": "fl", "old_string": "old", "new_string": "pwned"}},
		{"edit_file", map[string]any{"path": "dl/victim", "old_string": "old", "new_string": "pwned"}},
		{"edit_file", map[string]any{"path": rel + "/victim", "old_string": "old", "new_string": "pwned"}},
	} {
		res := h.call(h.cs, c.tool, c.args)
		if !res.IsError {
			t.Errorf("%s %v succeeded: %s", c.tool, c.args["path"], text(res))
		}
	}
	if got := entries(t, out); len(got) != 1 {
		t.Errorf("the directory outside now holds %v", got)
	}
	if b, _ := os.ReadFile(victim); string(b) != "old\n" {
		t.Errorf("the file outside now holds %q", b)
	}
	// The links themselves are still links: a refused write did not
	// replace them either (nor did anything land in the workspace instead).
	if fi, err := os.Lstat(filepath.Join(ws, "fl")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("fl: %v %v", fi, err)
	}
}

// cwd tricks: climbing out, through a planted link, through a link and
// back (lexically the workspace), an absolute path outside; start as run.
func TestRedteamCwdTricksStayInTheWorkspace(t *testing.T) {
	requireSandbox(t)
	ws, out := wsOutsideTmp(t), openOutside(t)
	h := newHarness(t, func(c *Config) { c.Workspace = ws })
	if r := h.runOut(map[string]any{"shell": fmt.Sprintf("mkdir -p sub && ln -s %s dl && ln -s %s sub/up", out, out)}); r.ExitCode != 0 {
		t.Fatalf("planting: %+v", r)
	}
	for _, cwd := range []string{"..", "sub/../..", out, "dl", "sub/up", "dl/.", "./dl", "sub/up/x/.."} {
		for _, tool := range []string{"run", "start"} {
			res := h.call(h.cs, tool, map[string]any{"shell": "echo x > pwned; echo y > " + out + "/pwned2", "cwd": cwd})
			if res.IsError {
				continue
			}
			if tool == "run" {
				var r runResult
				decode(t, res, &r)
				if r.ExitCode == 0 {
					t.Errorf("run in cwd %q succeeded: %+v", cwd, r)
				}
			} else {
				var st startResult
				decode(t, res, &st)
				waitExit(t, h, st.Handle)
			}
		}
	}
	// "dl/.." is lexically the workspace: it runs there, not above dl's
	// target.
	r := h.runOut(map[string]any{"shell": "pwd; echo x > lexical", "cwd": "dl/.."})
	if r.ExitCode != 0 || r.Stdout.Text != ws+"\n" {
		t.Errorf("cwd dl/..: %+v", r)
	}
	if got := entries(t, out); len(got) != 0 {
		t.Errorf("the directory outside now holds %v", got)
	}
}

// flipper starts, as the model would, a process that swaps ws/name
// between a real directory and a symlink to target as fast as it can
// (rename over, so the name always exists). It stops with the test.
func flipper(t *testing.T, h *harness, name, target string) {
	t.Helper()
	script := fmt.Sprintf(`mkdir -p .d.%[1]s; ln -sfn %[2]s .l.%[1]s
while :; do
  mkdir -p .d.%[1]s; mv -T .d.%[1]s %[1]s 2>/dev/null
  ln -sfn %[2]s .l.%[1]s; mv -T .l.%[1]s %[1]s 2>/dev/null
  rm -rf .d.%[1]s; mv -T %[1]s .d.%[1]s 2>/dev/null
done`, name, target)
	var st startResult
	h.ok("start", map[string]any{"shell": script}, &st)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "terminate", Arguments: map[string]any{"handle": st.Handle}})
	})
}

// The executor refuses a cwd that crosses a symlink — a check by path.
// The model races it: ws/sub flips between a directory and a link to a
// directory outside while run after run asks for cwd "sub" and writes
// there.
func TestRedteamCwdSymlinkFlipRace(t *testing.T) {
	requireSandbox(t)
	ws, out := wsOutsideTmp(t), openOutside(t)
	h := newHarness(t, func(c *Config) { c.Workspace = ws })
	flipper(t, h, "sub", out)
	var ran, refused int
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		res := h.call(h.cs, "run", map[string]any{"shell": "echo x > pwned-$$-$(date +%N); echo y > " + out + "/abs-$(date +%N)", "cwd": "sub"})
		if res.IsError {
			refused++
		} else {
			ran++
		}
		if got := entries(t, out); len(got) != 0 {
			t.Fatalf("after %d runs (%d refused), the directory outside holds %v", ran+refused, refused, got)
		}
	}
	t.Logf("%d runs, %d refused", ran+refused, refused)
}

// The same race against write_file and edit_file, which the executor
// judges by descriptor.
func TestRedteamWriteFileSymlinkFlipRace(t *testing.T) {
	requireSandbox(t)
	ws, out := wsOutsideTmp(t), openOutside(t)
	h := newHarness(t, func(c *Config) { c.Workspace = ws })
	os.WriteFile(filepath.Join(out, "f"), []byte("old\n"), 0o666)
	flipper(t, h, "d", out)
	n := 0
	for deadline := time.Now().Add(8 * time.Second); time.Now().Before(deadline); n++ {
		h.call(h.cs, "write_file", map[string]any{"path": fmt.Sprintf("d/w%d", n), "content": "pwned\n"})
		h.call(h.cs, "write_file", map[string]any{"path": "d/f", "content": "pwned\n"})
		h.call(h.cs, "write_file", map[string]any{"path": fmt.Sprintf("d/n%d/f", n), "content": "pwned\n", "create_dirs": true})
		h.call(h.cs, "edit_file", map[string]any{"path": "d/f", "old_string": "old", "new_string": "pwned"})
	}
	if got := entries(t, out); len(got) != 1 {
		t.Errorf("after %d rounds the directory outside holds %v", n, got)
	}
	if b, _ := os.ReadFile(filepath.Join(out, "f")); string(b) != "old\n" {
		t.Errorf("after %d rounds the file outside holds %q", n, b)
	}
}

// The model's env reaches the sandbox helper, which the executor starts
// before the sandbox is in force: LD_PRELOAD names a library the model
// built in a directory it may write (/tmp), whose constructor runs in the
// helper — before Landlock, seccomp and the mounts. The constructor
// writes outside the workspace and connects to a TCP port on loopback.
func TestRedteamEnvLDPreloadRunsBeforeTheSandbox(t *testing.T) {
	requireSandbox(t)
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler to build the library the attack preloads")
	}
	out := openOutside(t)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := tcp.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	// The library: a constructor that writes outside the workspace and
	// dials $RT_PORT. The test builds it (a model would with run, or
	// write its bytes with printf); /tmp is where workspace-write lets a
	// command put it.
	lib, err := os.MkdirTemp("/tmp", "redteam-lib")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(lib) })
	os.Chmod(lib, 0o755)
	src := filepath.Join(lib, "evil.c")
	os.WriteFile(src, []byte(fmt.Sprintf(`#include <fcntl.h>
#include <unistd.h>
#include <stdlib.h>
#include <arpa/inet.h>
#include <sys/socket.h>
__attribute__((constructor)) static void evil(void) {
	int fd = open("%s/pwned", O_WRONLY|O_CREAT, 0666);
	if (fd >= 0) { write(fd, "x", 1); close(fd); }
	const char *port = getenv("RT_PORT");
	if (port) {
		struct sockaddr_in a = {0};
		a.sin_family = AF_INET; a.sin_port = htons(atoi(port)); a.sin_addr.s_addr = htonl(0x7f000001);
		int s = socket(AF_INET, SOCK_STREAM, 0);
		if (s >= 0) { connect(s, (struct sockaddr *)&a, sizeof a); close(s); }
	}
}
`, out)), 0o644)
	so := filepath.Join(lib, "evil.so")
	if b, err := exec.Command(cc, "-shared", "-fPIC", "-o", so, src).CombinedOutput(); err != nil {
		t.Skipf("building the library: %v %s", err, b)
	}
	os.Chmod(so, 0o755)
	pwned := filepath.Join(out, "pwned")
	// Sanity: the library does write when nothing stops it.
	if b, err := exec.Command("env", "LD_PRELOAD="+so, "true").CombinedOutput(); err != nil {
		t.Fatalf("preloading outside the sandbox: %v %s", err, b)
	}
	if _, err := os.Stat(pwned); err != nil {
		t.Fatalf("the library did not write when preloaded unsandboxed: %v", err)
	}
	os.Remove(pwned)
	port := fmt.Sprint(tcp.Addr().(*net.TCPAddr).Port)
	for _, readOnly := range []bool{false, true} {
		h := newHarness(t, func(c *Config) { c.Workspace = wsOutsideTmp(t); c.ReadOnly = readOnly })
		for _, env := range []map[string]string{{"LD_PRELOAD": so, "RT_PORT": port}, {"LD_AUDIT": so, "RT_PORT": port}} {
			for _, tool := range []string{"run", "start"} {
				if tool == "run" {
					h.runOut(map[string]any{"argv": []string{"true"}, "env": env})
				} else {
					var st startResult
					h.ok("start", map[string]any{"argv": []string{"true"}, "env": env}, &st)
					waitExit(t, h, st.Handle)
				}
				if fi, err := os.Stat(pwned); err == nil {
					t.Errorf("read-only server %v: %s with env %v wrote outside the workspace (a file owned by uid %d)", readOnly, tool, env, fi.Sys().(*syscall.Stat_t).Uid)
					os.Remove(pwned)
				}
				if n := accepted.Swap(0); n > 0 {
					t.Errorf("read-only server %v: %s with env %v connected to loopback without network", readOnly, tool, env)
				}
			}
		}
	}
}

// --- getting more than the operator allowed ---------------------------------

func TestRedteamSandboxSpellingsAndNetworkAreRefused(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	for _, mode := range []string{"full-access", "danger-full-access", "Full-Access", "FULL-ACCESS", " full-access", "full-access ", "full_access", "none", "off", "disabled", "danger", "workspace-write,full-access", "full-access\x00"} {
		for _, tool := range []string{"run", "start"} {
			res := h.call(h.cs, tool, map[string]any{"argv": []string{"true"}, "sandbox": mode})
			if !res.IsError {
				t.Errorf("%s with sandbox %q succeeded: %s", tool, mode, text(res))
			}
		}
	}
	for _, tool := range []string{"run", "start"} {
		for _, mode := range []string{"", "read-only", "workspace-write"} {
			res := h.call(h.cs, tool, map[string]any{"argv": []string{"true"}, "sandbox": mode, "network": true})
			if !res.IsError || res.Meta[KindMeta] != "not_allowed" {
				t.Errorf("%s with network in %q: %s", tool, mode, text(res))
			}
		}
	}
	// A read-only server refuses every mode but read-only, even one the
	// operator listed.
	ro := newHarness(t, func(c *Config) {
		c.ReadOnly = true
		c.AllowedSandboxes = []string{"read-only", "workspace-write", "full-access"}
	})
	for _, mode := range []string{"workspace-write", "full-access", "danger-full-access"} {
		res := ro.call(ro.cs, "run", map[string]any{"argv": []string{"true"}, "sandbox": mode})
		if !res.IsError {
			t.Errorf("read-only server ran sandbox %q: %s", mode, text(res))
		}
	}
}

// With the network off, a sandboxed command reaches neither a TCP port on
// loopback (the executor's own listener is one) nor a pathname Unix socket
// outside its workspace (a docker.sock, an agent's socket).
func TestRedteamNetworkOffReachesNoLocalSocket(t *testing.T) {
	requireSandbox(t)
	if _, err := os.Stat("/usr/bin/perl"); err != nil {
		t.Skip("no perl to play the client inside the sandbox")
	}
	h := newHarness(t, nil)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	out := openOutside(t)
	sock := filepath.Join(out, "agent.sock")
	ux, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ux.Close()
	os.Chmod(sock, 0o777)
	var accepted atomic.Int32
	for _, ln := range []net.Listener{tcp, ux} {
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				accepted.Add(1)
				c.Write([]byte("hello\n"))
				c.Close()
			}
		}()
	}
	port := tcp.Addr().(*net.TCPAddr).Port
	for _, mode := range []string{"workspace-write", "read-only"} {
		r := h.runOut(map[string]any{"sandbox": mode, "argv": []string{"/usr/bin/perl", "-MIO::Socket::INET", "-MIO::Socket::UNIX", "-e",
			fmt.Sprintf(`my $a = IO::Socket::INET->new(PeerAddr => "127.0.0.1:%d", Timeout => 3); print "tcp ", ($a ? "connected" : "refused: $!"), "\n";
			my $b = IO::Socket::UNIX->new(Peer => "%s"); print "unix ", ($b ? "connected" : "refused: $!"), "\n";`, port, sock)}})
		t.Logf("%s: %q %q", mode, r.Stdout.Text, r.Stderr.Text)
		if strings.Contains(r.Stdout.Text, " connected") {
			t.Errorf("%s without network connected: %s", mode, r.Stdout.Text)
		}
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("the listeners accepted %d connections from sandboxed commands", n)
	}
}

// A read-only server's commands write nowhere: not the workspace, not
// /tmp or /dev/shm, not through a pty, not by making sockets or fifos.
func TestRedteamReadOnlyServerWritesNowhere(t *testing.T) {
	requireSandbox(t)
	ws := wsOutsideTmp(t)
	h := newHarness(t, func(c *Config) { c.ReadOnly = true; c.Workspace = ws })
	tag := fmt.Sprintf("redteam-ro-%d", time.Now().UnixNano())
	script := fmt.Sprintf("for d in %s /tmp /dev/shm /var/tmp $HOME; do echo x > $d/%s.f; mkdir $d/%s.d; mkfifo $d/%s.p; ln -s / $d/%s.l; done; touch %s/; exit 0", ws, tag, tag, tag, tag, ws)
	h.runOut(map[string]any{"shell": script})
	var st startResult
	h.ok("start", map[string]any{"shell": script, "tty": true}, &st)
	waitExit(t, h, st.Handle)
	h.ok("start", map[string]any{"shell": script}, &st)
	waitExit(t, h, st.Handle)
	h.runOut(map[string]any{"shell": script, "cwd": "/tmp"})
	h.runOut(map[string]any{"shell": script, "cwd": "/"})
	for _, d := range []string{ws, "/tmp", "/dev/shm", "/var/tmp", os.Getenv("HOME"), "/"} {
		if d == "" {
			continue
		}
		m, _ := filepath.Glob(filepath.Join(d, tag+"*"))
		for _, p := range m {
			os.RemoveAll(p)
		}
		if len(m) > 0 {
			t.Errorf("a read-only server's command made %v", m)
		}
	}
	for _, tool := range []string{"write_file", "edit_file"} {
		if _, err := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"path": "f", "content": "x", "old_string": "a", "new_string": "b"}}); err == nil {
			t.Errorf("%s on a read-only server", tool)
		}
	}
}

// --- exhausting the server ----------------------------------------------

// edit_file checks the edited file against MaxFileBytes only after
// building it: a small file of one repeated byte, old_string that byte and
// a new_string of a few KiB make strings.ReplaceAll allocate
// count×len(new_string) first. At the bounds (16 MiB of "a", a 4 MiB
// new_string) that is 64 TiB: the runtime's out-of-memory is fatal, not a
// panic addTool could recover, and the whole server dies.
func TestRedteamEditFileRefusesABlowupWithoutBuildingIt(t *testing.T) {

	requireSandbox(t)
	h := newHarness(t, nil)
	const n, m = 32 << 10, 8 << 10 // 256 MiB edited
	os.WriteFile(filepath.Join(h.ws, "a"), bytes.Repeat([]byte("a"), n), 0o644)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h.fails("edit_file", map[string]any{"path": "a", "old_string": "a", "new_string": strings.Repeat("b", m), "expected_replacements": n}, "invalid_argument")
	runtime.ReadMemStats(&after)
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Fatalf("refusing an edit whose result is %d MiB allocated %d MiB", n*m>>20, d>>20)
	}
}

// search promises to read files up to SearchMaxFileBytes for content. It
// judges a file by the size stat reports and then reads it to its end:
// a file whose size says 0 and whose content does not end (proc files:
// /proc/kallsyms is megabytes, /proc/self/pagemap hundreds of GiB) is read
// whole into the server's memory. The path may name the file itself.
func TestRedteamSearchReadsNoMoreThanTheFileBound(t *testing.T) {

	requireSandbox(t)
	data, err := os.ReadFile("/proc/kallsyms")
	if err != nil || len(data) < 2*SearchMaxFileBytes {
		t.Skipf("no /proc/kallsyms larger than %d bytes to search (%d, %v)", 2*SearchMaxFileBytes, len(data), err)
	}
	// A symbol only past the first SearchMaxFileBytes.
	tail := data[len(data)-4096:]
	lines := strings.Split(strings.TrimSpace(string(tail)), "\n")
	f := strings.Fields(lines[len(lines)-1])
	needle := f[2]
	if bytes.Contains(data[:SearchMaxFileBytes+4096], []byte(needle)) {
		t.Skipf("%s is in the first MiB too", needle)
	}
	h := newHarness(t, nil)
	var sr searchResult
	h.ok("search", map[string]any{"path": "/proc/kallsyms", "content": needle, "max_results": 1}, &sr)
	for _, m := range sr.Matches {
		t.Fatalf("search read /proc/kallsyms past %d bytes: line %d %q (files skipped %d)", SearchMaxFileBytes, m.Line, m.Text, sr.Skipped)
	}
}

// read_file reaches its offset by reading and discarding every byte
// before it: a sparse file (truncate -s 1T, in the workspace) and an
// offset near its end pin the server, the connection and the executor for
// as long as a terabyte takes to cross — for a few bytes.
func TestRedteamReadFileAtAFarOffsetDoesNotReadWhatCameBefore(t *testing.T) {

	requireSandbox(t)
	h := newHarness(t, nil)
	const size = 8 << 30
	r := h.runOut(map[string]any{"shell": fmt.Sprintf("truncate -s %d sparse && printf END >> sparse", size)})
	if r.ExitCode != 0 {
		t.Fatalf("%+v", r)
	}
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"path": "sparse", "offset": size, "length": 3}})
	if err != nil {
		t.Fatalf("reading 3 bytes at offset %d: %v after %v", int64(size), err, time.Since(start))
	}
	var rf readFileResult
	decode(t, res, &rf)
	if rf.Content != "END" {
		t.Fatalf("%+v", rf)
	}
}

// search bounds the files it visits, not the directories: a tree of
// empty directories (the model makes one with a run) is walked whole, one
// fs/readDirectory per directory, with no bound to stop it.
func TestRedteamSearchBoundsDirectoriesToo(t *testing.T) {

	requireSandbox(t)
	h := newHarness(t, nil)
	const wide, per = 50, 500 // 25000 directories, no file
	for i := range wide {
		for j := range per {
			if err := os.MkdirAll(filepath.Join(h.ws, fmt.Sprint(i), fmt.Sprint(j)), 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	start := time.Now()
	var sr searchResult
	h.ok("search", map[string]any{"content": "x"}, &sr)
	t.Logf("searched %d directories in %v: visited %d, truncated %v", wide*per, time.Since(start), sr.Visited, sr.Truncated)
	if !sr.Truncated {
		t.Fatalf("a walk of %d directories (more entries than SearchMaxFiles) ran to its end", wide*per)
	}
}

// Huge outputs: a run's streams and a handle's buffer stay at their caps
// however much the command writes (here 30 MB each way, 30 times the cap), and the
// server's heap with them.
func TestRedteamHugeOutputsStayCapped(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	r := h.runOut(map[string]any{"shell": "head -c 30000000 /dev/zero | tr '\\0' x; head -c 30000000 /dev/zero | tr '\\0' y >&2", "max_output_bytes": MaxOutputBytes, "timeout_ms": 120000})
	if r.Stdout.TotalBytes != 30000000 || r.Stderr.TotalBytes != 30000000 || len(r.Stdout.Text) > MaxOutputBytes+1024 || len(r.Stderr.Text) > MaxOutputBytes+1024 {
		t.Fatalf("stdout %d/%d stderr %d/%d", len(r.Stdout.Text), r.Stdout.TotalBytes, len(r.Stderr.Text), r.Stderr.TotalBytes)
	}
	var st startResult
	h.ok("start", map[string]any{"shell": "head -c 30000000 /dev/zero | tr '\\0' z"}, &st)
	rd := waitExit(t, h, st.Handle)
	if hi := heapInUse(); hi > 256<<20 {
		t.Errorf("heap in use %d MiB after huge outputs", hi>>20)
	}
	h.ok("read", map[string]any{"handle": st.Handle}, &rd)
	if rd.DroppedBytes != 30000000-HandleOutput {
		t.Errorf("dropped %d", rd.DroppedBytes)
	}
}

// run's answer carries each stream twice (the text content and the
// structured result), and a control byte is six in JSON (\u0000): two
// streams of 1 MiB of NULs make a 24 MiB message, past the SDK client's
// DefaultMaxLineLength (16 MiB) and the server's own MaxMessageBytes. The
// official client drops the connection, and with it the session and
// every process it started.
func TestRedteamRunAnswerFitsTheClientsFrame(t *testing.T) {

	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "300"}}, &st)
	res, err := h.cs.CallTool(ctxT(t), &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"shell": "head -c 2000000 /dev/zero; head -c 2000000 /dev/zero >&2", "max_output_bytes": MaxOutputBytes}})
	if err != nil {
		t.Fatalf("run printing NULs: %v", err)
	}
	if res.IsError {
		t.Fatalf("run: %s", text(res))
	}
	h.ok("terminate", map[string]any{"handle": st.Handle}, nil)
}

// A progress flood: a command writing many small chunks with a progress
// token. The notifications are bounded per chunk, the call completes, and
// nothing is left behind.
func TestRedteamProgressFloodCompletes(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	params := &mcp.CallToolParams{Name: "run", Arguments: map[string]any{"shell": "i=0; while [ $i -lt 20000 ]; do echo $i; i=$((i+1)); done"}}
	params.SetProgressToken("flood")
	before := runtime.NumGoroutine()
	res, err := h.cs.CallTool(ctxT(t), params)
	if err != nil || res.IsError {
		t.Fatalf("%v %s", err, text(res))
	}
	h.progMu.Lock()
	n := len(h.prog)
	for _, p := range h.prog {
		if len(p.Message) > progressMessageBytes+16 {
			t.Errorf("a progress message of %d bytes", len(p.Message))
		}
	}
	h.progMu.Unlock()
	t.Logf("%d progress notifications", n)
	time.Sleep(200 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+20 {
		t.Errorf("goroutines %d → %d", before, after)
	}
}

// read's wait_ms loop: a read waiting on a silent process returns at its
// bound, and a cancelled one at once; neither leaves a goroutine.
func TestRedteamReadWaitIsBoundedAndCancellable(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	var st startResult
	h.ok("start", map[string]any{"argv": []string{"sleep", "120"}}, &st)
	h.fails("read", map[string]any{"handle": st.Handle, "wait_ms": MaxWait.Milliseconds() + 1}, "invalid_argument")
	before := runtime.NumGoroutine()
	for range 10 {
		ctx, cancel := context.WithTimeout(ctxT(t), 100*time.Millisecond)
		start := time.Now()
		h.cs.CallTool(ctx, &mcp.CallToolParams{Name: "read", Arguments: map[string]any{"handle": st.Handle, "wait_ms": MaxWait.Milliseconds()}})
		cancel()
		if d := time.Since(start); d > 5*time.Second {
			t.Fatalf("a cancelled read returned after %v", d)
		}
	}
	time.Sleep(300 * time.Millisecond)
	if after := runtime.NumGoroutine(); after > before+10 {
		t.Errorf("goroutines %d → %d after cancelled reads", before, after)
	}
	h.ok("terminate", map[string]any{"handle": st.Handle}, nil)
}

// --- leaving processes behind ------------------------------------------

// A run still in flight when its session ends (the agent's process dies:
// its stdio pipes close): the command must end with the session, not run
// on to its timeout (here 20 minutes).
func TestRedteamRunInFlightEndsWithTheSession(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	p := newStdioPeer(t, h.srv)
	p.handshake()
	arg := uniqueSleep()
	p.send(map[string]any{"id": 2, "method": "tools/call", "params": map[string]any{"name": "run", "arguments": map[string]any{"argv": []string{"sleep", arg}, "timeout_ms": 20 * 60 * 1000}}})
	for deadline := time.Now().Add(testTimeout); len(processesNamed(arg)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the command never started")
		}
	}
	p.in.Close()
	p.outR.Close()
	for deadline := time.Now().Add(20 * time.Second); len(processesNamed(arg)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("processes %v still run 20 s after their session ended", processesNamed(arg))
		}
	}
}

// A command that escapes its process group (setsid, a double fork, its
// output detached) must still not outlive the run that started it, nor a
// started one its session.
func TestRedteamDetachedChildrenDoNotOutliveTheSession(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	a, b := uniqueSleep(), uniqueSleep()+"1"
	r := h.runOut(map[string]any{"shell": fmt.Sprintf("(setsid sleep %s </dev/null >/dev/null 2>&1 &) ; echo detached", a)})
	if r.ExitCode != 0 {
		t.Fatalf("%+v", r)
	}
	for deadline := time.Now().Add(10 * time.Second); len(processesNamed(a)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a detached child %v outlived its run by 10 s", processesNamed(a))
		}
	}
	var st startResult
	h.ok("start", map[string]any{"shell": fmt.Sprintf("(setsid nohup sleep %s </dev/null >/dev/null 2>&1 &) ; exec sleep 600", b)}, &st)
	for deadline := time.Now().Add(testTimeout); len(processesNamed(b)) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the detached child never started")
		}
	}
	h.cs.Close()
	for deadline := time.Now().Add(20 * time.Second); len(processesNamed(b)) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("a detached child %v outlived its session by 20 s", processesNamed(b))
		}
	}
}

// A start racing the end of its session: whichever wins, no process is
// left running.
func TestRedteamStartRacingTheSessionsEndLeavesNothing(t *testing.T) {
	requireSandbox(t)
	h := newHarness(t, nil)
	for i := range 5 {
		cs := h.connect()
		arg := uniqueSleep() + fmt.Sprint(i)
		var wg sync.WaitGroup
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "start", Arguments: map[string]any{"argv": []string{"sleep", arg}}})
			}()
		}
		time.Sleep(time.Duration(i*30) * time.Millisecond)
		cs.Close()
		wg.Wait()
		for deadline := time.Now().Add(20 * time.Second); len(processesNamed(arg)) > 0; time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %v still run after their session ended", i, processesNamed(arg))
			}
		}
	}
}

// --- a web page on the local HTTP port ----------------------------------

func rtHTTP(t *testing.T, token string) *httptest.Server {
	t.Helper()
	srv, err := New(Config{Executors: []Executor{{ID: "e1", Dial: unreachable}}, Workspace: "/"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	hs := httptest.NewServer(srv.HTTPHandler(HTTPOptions{Token: token}))
	t.Cleanup(hs.Close)
	return hs
}

func rtDo(t *testing.T, method, url, body string, header map[string]string) *http.Response {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, _ := http.NewRequest(method, url, rd)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, io.LimitReader(res.Body, 1<<16))
	res.Body.Close()
	return res
}

// A page the user has open: DNS rebinding with an Origin to match its
// Host, lookalike hosts, an opaque origin, a CORS preflight, a form's
// text/plain POST, and a browser's Sec-Fetch-Site without an Origin.
func TestRedteamHTTPRefusesAWebPage(t *testing.T) {
	for _, token := range []string{"", "tok"} {
		hs := rtHTTP(t, token)
		_, port, _ := net.SplitHostPort(strings.TrimPrefix(hs.URL, "http://"))
		auth := map[string]string{}
		if token != "" {
			auth["Authorization"] = "Bearer " + token
		}
		with := func(kv ...string) map[string]string {
			m := map[string]string{}
			for k, v := range auth {
				m[k] = v
			}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			return m
		}
		for name, hdr := range map[string]map[string]string{
			"rebinding, matching origin": with("Host", "evil.example:"+port, "Origin", "http://evil.example:"+port),
			"lookalike localhost":        with("Host", "localhost.evil.example:"+port, "Origin", "http://localhost.evil.example:"+port),
			"lookalike ip":               with("Host", "127.0.0.1.nip.io:"+port, "Origin", "http://127.0.0.1.nip.io:"+port),
			"opaque origin":              with("Origin", "null"),
			"file origin":                with("Origin", "file://"),
			"userinfo origin":            with("Origin", "http://127.0.0.1:"+port+"@evil.example"),
			"sec-fetch cross-site":       with("Sec-Fetch-Site", "cross-site"),
			"sec-fetch same-site":        with("Sec-Fetch-Site", "same-site"),
			"form text/plain":            with("Origin", "http://evil.example", "Content-Type", "text/plain"),
		} {
			res := rtDo(t, http.MethodPost, hs.URL, initBody, hdr)
			if res.StatusCode < 400 {
				t.Errorf("token %q, %s: status %d", token, name, res.StatusCode)
			}
			if res.Header.Get("Mcp-Session-Id") != "" {
				t.Errorf("token %q, %s: a session was opened", token, name)
			}
		}
		pre := rtDo(t, http.MethodOptions, hs.URL, "", map[string]string{"Origin": "http://evil.example", "Access-Control-Request-Method": "POST", "Access-Control-Request-Headers": "content-type, mcp-session-id, authorization"})
		if acao := pre.Header.Get("Access-Control-Allow-Origin"); acao != "" {
			t.Errorf("token %q: a preflight was answered with Access-Control-Allow-Origin %q", token, acao)
		}
		for _, m := range []string{http.MethodGet, http.MethodDelete, http.MethodPut} {
			res := rtDo(t, m, hs.URL, "", map[string]string{"Origin": "http://evil.example"})
			if res.StatusCode < 400 {
				t.Errorf("token %q: cross-origin %s: status %d", token, m, res.StatusCode)
			}
		}
	}
}

// With a token, no method gets past without it — not GET (a session's
// event stream), not DELETE (ending someone's session), even with the
// right session id.
func TestRedteamHTTPTokenGuardsEveryMethod(t *testing.T) {
	hs := rtHTTP(t, "s3cret")
	res := rtDo(t, http.MethodPost, hs.URL, initBody, map[string]string{"Authorization": "Bearer s3cret"})
	sid := res.Header.Get("Mcp-Session-Id")
	if res.StatusCode != http.StatusOK || sid == "" {
		t.Fatalf("initialize: %d, session %q", res.StatusCode, sid)
	}
	initialized := `{"jsonrpc":"2.0","method":"notifications/initialized"}`
	if res := rtDo(t, http.MethodPost, hs.URL, initialized, map[string]string{"Authorization": "Bearer s3cret", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}); res.StatusCode >= 300 {
		t.Fatalf("initialized: %d", res.StatusCode)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	for _, auth := range []string{"", "Bearer s3cre", "bearer s3cret", "Bearer  s3cret", "Basic czNjcmV0"} {
		hdr := map[string]string{"Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
		if auth != "" {
			hdr["Authorization"] = auth
		}
		for _, c := range []struct{ method, body string }{{http.MethodGet, ""}, {http.MethodDelete, ""}, {http.MethodPost, list}, {http.MethodPost, initBody}} {
			if res := rtDo(t, c.method, hs.URL, c.body, hdr); res.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s with Authorization %q: status %d", c.method, auth, res.StatusCode)
			}
		}
	}
	// The session survived all that.
	hdr := map[string]string{"Authorization": "Bearer s3cret", "Mcp-Session-Id": sid, "Mcp-Protocol-Version": "2025-06-18"}
	if res := rtDo(t, http.MethodPost, hs.URL, list, hdr); res.StatusCode != http.StatusOK {
		t.Errorf("tools/list with the token after the attempts: %d", res.StatusCode)
	}
	if res := rtDo(t, http.MethodDelete, hs.URL, "", hdr); res.StatusCode >= 300 {
		t.Errorf("DELETE with the token: %d", res.StatusCode)
	}
}
