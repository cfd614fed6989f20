package peers

// A relay cluster as separate processes, for the cluster benchmarks: one
// etcd member and `outpost relay serve --store etcd://…` relays sharing
// one key, each on a port fixed in advance (its advertised address, and
// the port it comes back on after a restart).

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/internal/procgroup"
)

// EtcdBinary finds etcd: on $PATH, or /usr/bin/etcd. The error says how
// to install it.
func EtcdBinary() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/bin/etcd"); err == nil {
		return "/usr/bin/etcd", nil
	}
	return "", errors.New("etcd is not installed (apt-get install etcd-server)")
}

// Etcd is a one-member etcd started as a process.
type Etcd struct {
	// Addr is the client address, 127.0.0.1:PORT.
	Addr string
	cmd  *exec.Cmd
	done chan struct{}
	log  string
}

// StartEtcd starts a one-member etcd on free loopback ports with its data
// and log in dir, and waits (bounded by ctx) until it answers /health.
func StartEtcd(ctx context.Context, dir string) (*Etcd, error) {
	bin, err := EtcdBinary()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	ports, err := FreePorts(2)
	if err != nil {
		return nil, err
	}
	client := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peer := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	e := &Etcd{Addr: "127.0.0.1:" + strconv.Itoa(ports[0]), done: make(chan struct{}), log: filepath.Join(dir, "etcd.log")}
	logf, err := os.Create(e.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	e.cmd = exec.Command(bin, "--name", "bench", "--data-dir", filepath.Join(dir, "data"),
		"--listen-client-urls", client, "--advertise-client-urls", client,
		"--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
		"--initial-cluster", "bench="+peer, "--initial-cluster-state", "new",
		"--logger", "zap", "--log-outputs", "stderr")
	e.cmd.Stdout, e.cmd.Stderr = logf, logf
	// etcd reads ETCD_* variables as flags: none of the caller's.
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			e.cmd.Env = append(e.cmd.Env, kv)
		}
	}
	procgroup.Own(e.cmd)
	if err := e.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", bin, err)
	}
	go func() { e.cmd.Wait(); close(e.done) }()
	for {
		if body, err := httpGet(ctx, "http://"+e.Addr+"/health"); err == nil && strings.Contains(body, `"health":"true"`) {
			return e, nil
		}
		select {
		case <-e.done:
			return nil, fmt.Errorf("etcd exited at start: %s", tailOf(e.log))
		case <-ctx.Done():
			e.Stop()
			return nil, fmt.Errorf("etcd not healthy: %w: %s", ctx.Err(), tailOf(e.log))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// StoreURL is the etcd store URL outpost takes: etcd://ADDR/prefix.
func (e *Etcd) StoreURL(prefix string) string {
	return "etcd://" + e.Addr + "/" + strings.TrimPrefix(prefix, "/")
}

// Pid is etcd's process id.
func (e *Etcd) Pid() int { return e.cmd.Process.Pid }

// Metrics scrapes etcd's own /metrics (unlabelled series only).
func (e *Etcd) Metrics(ctx context.Context) (map[string]float64, error) {
	return ScrapeMetrics(ctx, "http://"+e.Addr+"/metrics")
}

// Stop kills etcd and waits (at most 5 s) for it to be reaped.
func (e *Etcd) Stop() {
	if e.cmd.Process == nil {
		return
	}
	procgroup.Kill(e.cmd.Process.Pid)
	select {
	case <-e.done:
	case <-time.After(5 * time.Second):
	}
}

// FreePorts picks n distinct free loopback ports, holding them all until
// every one is picked. Another process may take one before its user
// binds it; callers fail then, with the bind error.
func FreePorts(n int) ([]int, error) {
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			ln.Close()
		}
	}()
	ports := make([]int, 0, n)
	for range n {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port: %w", err)
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// RelayInit makes a relay key in stateDir (`outpost relay init`) and
// returns its fingerprint: the cluster key every relay started on
// stateDir shares.
func RelayInit(ctx context.Context, bin, stateDir string) (string, error) {
	out, err := exec.CommandContext(ctx, bin, "relay", "init", "--state-dir", stateDir).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return "", fmt.Errorf("outpost relay init: %w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return "", fmt.Errorf("outpost relay init: %w", err)
	}
	fp := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(fp, '#'); i >= 0 {
		fp = fp[i+1:]
	}
	if fp == "" || strings.ContainsAny(fp, " \n") {
		return "", fmt.Errorf("outpost relay init printed %q, not a fingerprint", out)
	}
	return fp, nil
}

// ClusterRelay is how StartClusterRelay starts one relay of a cluster.
type ClusterRelay struct {
	StateDir  string // holds the cluster key (RelayInit)
	Store     string // etcd://ADDR/prefix
	ID        string // --relay-id
	Port      int    // listens on, and advertises, 127.0.0.1:Port
	AdminPort int    // --admin-listen 127.0.0.1:AdminPort
	Extra     []string
	Env       []string
}

// Addr is the relay's HOST:PORT.
func (c ClusterRelay) Addr() string { return "127.0.0.1:" + strconv.Itoa(c.Port) }

// Admin is the relay's admin base URL.
func (c ClusterRelay) Admin() string { return "http://127.0.0.1:" + strconv.Itoa(c.AdminPort) }

// StartClusterRelay starts `outpost relay serve` as a member of a cluster
// on etcd and returns once it has printed its URL.
func StartClusterRelay(ctx context.Context, bin string, c ClusterRelay) (*Server, error) {
	argv := []string{bin, "relay", "serve", "--listen", "tcp://" + c.Addr(), "--state-dir", c.StateDir,
		"--store", c.Store, "--relay-id", c.ID, "--cluster-advertise", c.Addr(),
		"--admin-listen", "127.0.0.1:" + strconv.Itoa(c.AdminPort), "--log-level", "warn"}
	return Start(ctx, c.Env, append(argv, c.Extra...)...)
}

// Kill sends SIGKILL to the server's process group (a crash: nothing is
// cleaned up) and waits, at most 5 s, until it is reaped.
func (s *Server) Kill() error {
	if s.cmd.Process == nil {
		return nil
	}
	procgroup.Kill(s.cmd.Process.Pid)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("pid %d not reaped within 5 s of SIGKILL", s.cmd.Process.Pid)
	}
}

// WaitReady waits until the admin endpoint's /readyz answers 200 (a
// relay of a cluster: holding its etcd lease), bounded by ctx.
func WaitReady(ctx context.Context, admin string) error {
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, admin+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d: %s", resp.StatusCode, strings.TrimSpace(string(body)))
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s/readyz: %w (last: %v)", admin, ctx.Err(), last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// ScrapeMetrics fetches a Prometheus text endpoint and returns its
// unlabelled samples by name.
func ScrapeMetrics(ctx context.Context, url string) (map[string]float64, error) {
	body, err := httpGet(ctx, url)
	if err != nil {
		return nil, err
	}
	m := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		f := strings.Fields(line)
		if len(f) < 2 || strings.ContainsRune(f[0], '{') {
			continue
		}
		if v, err := strconv.ParseFloat(f[1], 64); err == nil {
			m[f[0]] = v
		}
	}
	return m, nil
}

// httpGet is a GET bounded by ctx and by 5 s.
func httpGet(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	return string(body), nil
}

// tailOf is the end of a log file, for an error message.
func tailOf(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return strings.TrimSpace(string(b))
}
