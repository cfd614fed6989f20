//go:build linux

package hardening

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/transport"
)

// settleTimeout bounds how long a process may take to return to its
// baseline after a case (sessions detached by a vanished client linger for
// the executors' --detached-ttl, set short below).
const settleTimeout = 15 * time.Second

var outpostBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "outpost-hardening-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	outpostBin = filepath.Join(dir, "outpost")
	if out, err := exec.Command("go", "build", "-o", outpostBin, "github.com/outpost-exec/outpost/cmd/outpost").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building outpost: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// syncBuffer collects a child's stderr.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// daemon is one outpost process under test.
type daemon struct {
	name   string
	cmd    *exec.Cmd
	url    string // the first line it printed
	admin  string // http://HOST:PORT
	stderr *syncBuffer
}

var adminLine = regexp.MustCompile(`admin: (http://[^/\s]+)/metrics`)

// startDaemon runs outpost with args and --admin-listen, and waits for its
// URL (when printsURL) and its admin address.
func startDaemon(t testing.TB, name string, printsURL bool, args ...string) *daemon {
	t.Helper()
	args = append(args, "--admin-listen", "127.0.0.1:0")
	if !slices.Contains(args, "--log-level") {
		args = append(args, "--log-level", "warn")
	}
	d := &daemon{name: name, cmd: exec.Command(outpostBin, args...), stderr: &syncBuffer{}}
	d.cmd.Stderr = d.stderr
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.cmd.Process.Signal(syscall.SIGTERM)
		exited := make(chan struct{})
		go func() { d.cmd.Wait(); close(exited) }()
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			d.cmd.Process.Kill()
			<-exited
			t.Errorf("%s did not exit on SIGTERM", name)
		}
	})
	out := bufio.NewReader(stdout)
	if printsURL {
		line, err := out.ReadString('\n')
		if err != nil {
			t.Fatalf("%s printed no URL: %v\n%s", name, err, d.stderr.String())
		}
		d.url = strings.TrimSpace(line)
	}
	go io.Copy(io.Discard, out)
	deadline := time.Now().Add(20 * time.Second)
	for {
		if m := adminLine.FindStringSubmatch(d.stderr.String()); m != nil {
			d.admin = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s printed no admin address: %s", name, d.stderr.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	return d
}

// scrapeClient never keeps connections, so scraping leaves no goroutines
// behind in the daemon.
var scrapeClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}

func (d *daemon) get(path string) (int, string, error) {
	resp, err := scrapeClient.Get(d.admin + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric returns the value of an unlabelled metric.
func (d *daemon) metric(t testing.TB, name string) float64 {
	t.Helper()
	_, body, err := d.get("/metrics")
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil {
				t.Fatalf("%s: %q", d.name, line)
			}
			return f
		}
	}
	t.Fatalf("%s: no metric %s", d.name, name)
	return 0
}

// usage is what must not grow: goroutines, open fds, child processes
// (zombies included), and an executor's per-command cgroups and the
// processes in them (which catches descendants that left with setsid).
type usage struct{ goroutines, fds, children, cgroups, cgroupProcs int }

func (d *daemon) usage(t testing.TB) usage {
	t.Helper()
	pid := d.cmd.Process.Pid
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		t.Fatalf("%s: %v", d.name, err)
	}
	u := usage{goroutines: int(d.metric(t, "go_goroutines")), fds: len(fds), children: len(childrenOf(pid))}
	u.cgroups, u.cgroupProcs = commandCgroups(pid)
	return u
}

// commandCgroups counts the per-command cgroups of the daemon with this
// pid and the processes in them (0, 0 without cgroups).
func commandCgroups(pid int) (cgroups, procs int) {
	p := cgroup.ProbeMachine()
	if p.Unavailable != nil {
		return 0, 0
	}
	dir := filepath.Join(p.Base, "outpost-"+strconv.Itoa(pid))
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() && strings.HasPrefix(e.Name(), "cmd-") {
			cgroups++
			b, _ := os.ReadFile(filepath.Join(dir, e.Name(), "cgroup.procs"))
			procs += len(strings.Fields(string(b)))
		}
	}
	return cgroups, procs
}

// childrenOf lists the processes whose parent is pid.
func childrenOf(pid int) []string {
	var kids []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces and parens.
		rest := string(b[bytes.LastIndexByte(b, ')')+1:])
		f := strings.Fields(rest)
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			kids = append(kids, e.Name()+" "+f[0])
		}
	}
	return kids
}

// settle waits until every daemon answers /readyz and is back at or below
// its baseline.
func settle(t testing.TB, base map[*daemon]usage) {
	t.Helper()
	deadline := time.Now().Add(settleTimeout)
	for d, b := range base {
		for {
			code, _, err := d.get("/readyz")
			u := d.usage(t)
			if err == nil && code == 200 && u.goroutines <= b.goroutines && u.fds <= b.fds && u.children <= b.children &&
				u.cgroups <= b.cgroups && u.cgroupProcs <= b.cgroupProcs {
				break
			}
			if d.cmd.ProcessState != nil {
				t.Fatalf("%s exited: %s", d.name, d.stderr.String())
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s did not recover: readyz %d (%v); now %+v, baseline %+v; children %v\n%s",
					d.name, code, err, u, b, childrenOf(d.cmd.Process.Pid), d.stderr.String())
			}
			time.Sleep(25 * time.Millisecond)
		}
	}
}

// baseline records each daemon's usage once it has been steady for a
// moment (lazily started goroutines have started).
func baseline(t testing.TB, ds ...*daemon) map[*daemon]usage {
	t.Helper()
	base := map[*daemon]usage{}
	for _, d := range ds {
		prev := d.usage(t)
		for range 200 {
			time.Sleep(25 * time.Millisecond)
			u := d.usage(t)
			if u == prev {
				break
			}
			prev = u
		}
		base[d] = prev
	}
	return base
}

// splitURL returns a tcp:// or outpost:// URL's address and pinned key.
func splitURL(t testing.TB, url string) (string, identity.PublicKey) {
	t.Helper()
	rest, fp, ok := strings.Cut(url, "#")
	if !ok {
		t.Fatalf("no fingerprint in %q", url)
	}
	_, addr, _ := strings.Cut(rest, "://")
	k, err := identity.ParsePublicKey(fp)
	if err != nil {
		t.Fatal(err)
	}
	return addr, k
}

// noiseSession authenticates to a native listener (purpose "exec") or a
// relay (purpose "relay") and returns the mux session.
func noiseSession(t testing.TB, url, purpose string) *transport.MuxSession {
	t.Helper()
	addr, pub := splitURL(t, url)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := transport.NoiseInitiator(ctxT(t, 10*time.Second), c, transport.NoiseConfig{Static: k.Keypair(), Purpose: purpose, PeerStatic: pub[:]})
	if err != nil {
		c.Close()
		t.Fatal(err)
	}
	sess, err := transport.MuxClient(nc, transport.DefaultMuxConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sess.Close() })
	return sess
}

// dialClient connects the client package to url.
func dialClient(t testing.TB, url string, opts client.Config) *client.Remote {
	t.Helper()
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	opts.Key = k
	opts.KnownExecutors = filepath.Join(t.TempDir(), "known_executors")
	env, err := client.Dial(ctxT(t, 20*time.Second), url, opts)
	if err != nil {
		t.Fatalf("dial %s: %v", url, err)
	}
	t.Cleanup(func() { env.Close() })
	return env
}

// tokenCreate makes a relay token with the CLI.
func tokenCreate(t testing.TB, stateDir string, args ...string) string {
	t.Helper()
	out, err := exec.Command(outpostBin, append([]string{"token", "create", "--state-dir", stateDir}, args...)...).Output()
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

// waitClosed reads c until the peer closes it (or d passes, a failure).
func waitClosed(t testing.TB, c net.Conn, d time.Duration) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	b, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("%s: still open after %v", c.RemoteAddr(), d)
	}
	return b
}
