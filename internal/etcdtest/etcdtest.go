// Package etcdtest runs real etcd clusters for tests: Start launches n
// `etcd` processes (1 or 3) on free loopback ports, each with its own data
// directory under t.TempDir(), waits until the cluster has a leader and
// answers a linearizable read, and kills the processes when the test ends.
//
// Tests use real etcd, never a mock, because what they check — optimistic
// transactions conflicting, a member dying, a leader being re-elected — is
// the server's behaviour, not the client library's.
//
// Every wait is bounded (StartTimeout for a cluster to become healthy,
// LeaderTimeout for an election); a cluster that misses one fails the test
// with the tail of each member's log rather than hanging it. Members run
// with short election timeouts (50 ms heartbeats, 500 ms elections) so that
// a killed leader is replaced within about a second.
//
// Without an etcd binary on $PATH (or /usr/bin/etcd) the test is skipped,
// or fails where OUTPOST_REQUIRE names etcd (internal/testdeps): `apt-get
// install etcd-server` installs it.
package etcdtest

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// Bounds on the waits of this package.
const (
	// StartTimeout bounds the wait for a started (or restarted) cluster to
	// become healthy.
	StartTimeout = 20 * time.Second
	// LeaderTimeout bounds the wait for a leader in Leader.
	LeaderTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a killed process to be reaped.
	stopTimeout = 5 * time.Second
	// probeTimeout bounds one health probe of one member.
	probeTimeout = 1 * time.Second
	// startAttempts: a free port picked by listening on :0 may be taken by
	// someone else before etcd binds it; the whole cluster is then started
	// again on new ports.
	startAttempts = 3
	// logTailLines of each member's log are shown when a wait fails.
	logTailLines = 30
)

// Cluster is a running etcd cluster of real processes.
type Cluster struct {
	t       testing.TB
	bin     string
	dir     string
	token   string
	members []*member

	mu sync.Mutex // guards each member's proc
}

// member is one etcd process and what it needs to be restarted as the
// same member: its name, data directory and ports never change.
type member struct {
	name       string
	dataDir    string
	logPath    string
	clientPort int
	peerPort   int
	proc       *proc // nil while killed
}

// proc is a started etcd process; done closes once it has been reaped.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // the Wait error, valid after done
}

// binary finds the etcd binary.
func binary() (string, bool) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, true
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", true
	}
	return "", false
}

// Start starts an n-member cluster (n is 1 or 3) and returns it once it is
// healthy; the members are killed when the test ends.
func Start(t testing.TB, n int) *Cluster {
	t.Helper()
	bin, ok := binary()
	if !ok {
		testdeps.Missing(t, "etcd", "etcd not installed: apt-get install etcd-server")
	}
	if n != 1 && n != 3 {
		t.Fatalf("etcdtest: a cluster has 1 or 3 members, not %d", n)
	}
	c := &Cluster{t: t, bin: bin, dir: t.TempDir()}
	t.Cleanup(c.stopAll)
	var lastErr error
	for attempt := 0; attempt < startAttempts; attempt++ {
		if lastErr = c.startFresh(n, attempt); lastErr == nil {
			return c
		}
		c.stopAll()
		if !errors.Is(lastErr, errPortTaken) {
			break
		}
	}
	t.Fatalf("etcdtest: starting a %d-member etcd cluster: %v\n%s", n, lastErr, c.logTails())
	return nil
}

// errPortTaken: a member exited at start because its port was taken.
var errPortTaken = errors.New("a port was taken before etcd bound it")

// startFresh lays out a new cluster (new ports, new data directories) and
// starts every member.
func (c *Cluster) startFresh(n, attempt int) error {
	ports, err := freePorts(2 * n)
	if err != nil {
		return err
	}
	c.token = fmt.Sprintf("etcdtest-%d-%d", os.Getpid(), attempt)
	c.members = make([]*member, n)
	var initial []string
	for i := range c.members {
		m := &member{
			name:       "m" + strconv.Itoa(i),
			clientPort: ports[2*i],
			peerPort:   ports[2*i+1],
		}
		base := filepath.Join(c.dir, fmt.Sprintf("try%d-%s", attempt, m.name))
		m.dataDir = filepath.Join(base, "data")
		m.logPath = filepath.Join(base, "etcd.log")
		if err := os.MkdirAll(base, 0o700); err != nil {
			return err
		}
		c.members[i] = m
		initial = append(initial, m.name+"="+m.peerURL())
	}
	for _, m := range c.members {
		if err := c.spawn(m, strings.Join(initial, ",")); err != nil {
			return err
		}
	}
	return c.waitHealthy(StartTimeout)
}

func (m *member) clientAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(m.clientPort))
}
func (m *member) clientURL() string { return "http://" + m.clientAddr() }
func (m *member) peerURL() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(m.peerPort))
}

// spawn starts m's process. A restarted member has a data directory, and
// etcd then ignores the --initial-* flags, so the same arguments do for
// both.
func (c *Cluster) spawn(m *member, initialCluster string) error {
	logf, err := os.OpenFile(m.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own copy
	cmd := exec.Command(c.bin,
		"--name", m.name,
		"--data-dir", m.dataDir,
		"--listen-client-urls", m.clientURL(),
		"--advertise-client-urls", m.clientURL(),
		"--listen-peer-urls", m.peerURL(),
		"--initial-advertise-peer-urls", m.peerURL(),
		"--initial-cluster", initialCluster,
		"--initial-cluster-state", "new",
		"--initial-cluster-token", c.token,
		// Short timeouts: a killed leader is replaced in about a second.
		"--heartbeat-interval", "50",
		"--election-timeout", "500",
		"--logger", "zap",
		"--log-outputs", "stderr",
	)
	cmd.Stdout, cmd.Stderr = logf, logf
	// etcd reads ETCD_* variables as flags: a developer's own settings must
	// not leak into the test cluster.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	// If the test binary dies without running its cleanups, the members
	// die with it rather than linger holding ports.
	procgroup.Own(cmd)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", c.bin, err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	c.mu.Lock()
	m.proc = p
	c.mu.Unlock()
	return nil
}

// freePorts picks n distinct free loopback ports, holding all of them
// until every one is picked so the kernel does not hand one out twice.
func freePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for i := 0; i < n; i++ {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// Endpoints are the members' client addresses (host:port), killed members
// included, in member order.
func (c *Cluster) Endpoints() []string {
	out := make([]string, len(c.members))
	for i, m := range c.members {
		out[i] = m.clientAddr()
	}
	return out
}

// URL is the cluster as an outpost store URL: etcd://h1:p1,h2:p2/prefix.
func (c *Cluster) URL(prefix string) string {
	return "etcd://" + strings.Join(c.Endpoints(), ",") + "/" + strings.TrimPrefix(prefix, "/")
}

// Client is a client of the given members (every member when none is
// given), closed when the test ends. Its logging is off.
func (c *Cluster) Client(t testing.TB, members ...int) *clientv3.Client {
	t.Helper()
	eps := c.Endpoints()
	if len(members) > 0 {
		eps = nil
		for _, i := range members {
			eps = append(eps, c.members[i].clientAddr())
		}
	}
	cli, err := newClient(eps)
	if err != nil {
		t.Fatalf("etcdtest: client: %v", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func newClient(eps []string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   eps,
		DialTimeout: 2 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// Kill kills member i (SIGKILL: no graceful leave, as a crash) and waits
// until it is reaped. Killing a killed member does nothing.
func (c *Cluster) Kill(i int) {
	c.t.Helper()
	c.mu.Lock()
	m := c.members[i]
	p := m.proc
	m.proc = nil
	c.mu.Unlock()
	if p == nil {
		return
	}
	if err := p.kill(); err != nil {
		c.t.Fatalf("etcdtest: killing member %d: %v", i, err)
	}
}

// kill sends SIGKILL and waits (bounded) for the process to be reaped.
func (p *proc) kill() error {
	p.cmd.Process.Signal(syscall.SIGKILL)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		return fmt.Errorf("pid %d not reaped within %v of SIGKILL", p.cmd.Process.Pid, stopTimeout)
	}
}

// Restart starts killed member i again, as the same member with the same
// data, and waits until the cluster is healthy with it.
func (c *Cluster) Restart(i int) {
	c.t.Helper()
	c.mu.Lock()
	running := c.members[i].proc != nil
	c.mu.Unlock()
	if running {
		c.t.Fatalf("etcdtest: Restart(%d): the member is running (Kill it first)", i)
	}
	var initial []string
	for _, m := range c.members {
		initial = append(initial, m.name+"="+m.peerURL())
	}
	if err := c.spawn(c.members[i], strings.Join(initial, ",")); err != nil {
		c.t.Fatalf("etcdtest: restarting member %d: %v", i, err)
	}
	if err := c.waitHealthy(StartTimeout); err != nil {
		c.t.Fatalf("etcdtest: after restarting member %d: %v\n%s", i, err, c.logTails())
	}
}

// Leader is the index of the current leader, waiting (at most
// LeaderTimeout) for one to be elected. It asks each running member for
// its status (the maintenance Status API) and trusts an answer only from
// the leader itself, so a member that has not yet heard of a new election
// cannot name a dead one.
func (c *Cluster) Leader(t testing.TB) int {
	t.Helper()
	deadline := time.Now().Add(LeaderTimeout)
	for {
		if i, ok := c.leader(); ok {
			return i
		}
		if time.Now().After(deadline) {
			t.Fatalf("etcdtest: no leader within %v\n%s", LeaderTimeout, c.logTails())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) leader() (int, bool) {
	for i, m := range c.members {
		if !c.running(i) {
			continue
		}
		st, err := status(m.clientAddr())
		if err != nil {
			continue
		}
		if st.Leader != 0 && st.Leader == st.Header.MemberId {
			return i, true
		}
	}
	return 0, false
}

func (c *Cluster) running(i int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.members[i].proc != nil
}

// status asks one member for its status, bounded by probeTimeout.
func status(ep string) (*clientv3.StatusResponse, error) {
	cli, err := newClient([]string{ep})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	return cli.Status(ctx, ep)
}

// waitHealthy waits until every running member knows a leader and a
// linearizable read through all of them succeeds. A member that exits
// meanwhile fails the wait at once (with errPortTaken when its log says
// its port was taken).
func (c *Cluster) waitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		if err := c.exited(); err != nil {
			return err
		}
		if last = c.probe(); last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not healthy within %v: %w", timeout, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// exited reports a running member whose process has ended.
func (c *Cluster) exited() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, m := range c.members {
		if m.proc == nil {
			continue
		}
		select {
		case <-m.proc.done:
			tail := tailFile(m.logPath, logTailLines)
			if strings.Contains(tail, "address already in use") {
				return fmt.Errorf("member %d: %w", i, errPortTaken)
			}
			return fmt.Errorf("member %d exited: %v", i, m.proc.err)
		default:
		}
	}
	return nil
}

// probe checks every running member once.
func (c *Cluster) probe() error {
	var eps []string
	for i, m := range c.members {
		if !c.running(i) {
			continue
		}
		st, err := status(m.clientAddr())
		if err != nil {
			return fmt.Errorf("member %d: %w", i, err)
		}
		if st.Leader == 0 {
			return fmt.Errorf("member %d knows no leader", i)
		}
		eps = append(eps, m.clientAddr())
	}
	cli, err := newClient(eps)
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), probeTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, "etcdtest-health"); err != nil {
		return fmt.Errorf("linearizable read: %w", err)
	}
	return nil
}

// stopAll kills every member (at the test's end, or between attempts).
func (c *Cluster) stopAll() {
	c.mu.Lock()
	var procs []*proc
	for _, m := range c.members {
		if m.proc != nil {
			procs = append(procs, m.proc)
			m.proc = nil
		}
	}
	c.mu.Unlock()
	for _, p := range procs {
		if err := p.kill(); err != nil {
			c.t.Errorf("etcdtest: %v", err)
		}
	}
}

// logTails is the end of every member's log, for a failure message.
func (c *Cluster) logTails() string {
	var b strings.Builder
	for i, m := range c.members {
		fmt.Fprintf(&b, "--- etcd member %d (%s) log tail:\n%s\n", i, m.clientAddr(), tailFile(m.logPath, logTailLines))
	}
	return b.String()
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
