// Package peers starts exec-servers as separate processes — outpost's own
// binary and the real codex exec-server — for differential tests and
// side-by-side benchmarks.
package peers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outpost-exec/outpost/internal/procgroup"
)

// CodexVersion is the codex release the differential tests and the
// benchmarks compare against: the newest the registry served when outpost
// last matched it.
const CodexVersion = "0.171.0"

// CodexVersions are the releases the codex CLI tests run, oldest first:
// the first outpost matched, one between, and CodexVersion.
// scripts/install-codex.sh installs each.
var CodexVersions = []string{"0.145.0", "0.158.0", CodexVersion}

// RepoRoot finds the module root from the working directory.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// CodexBinary returns the binary of CodexVersion (see CodexBinaryAt).
func CodexBinary() (string, error) { return CodexBinaryAt(CodexVersion) }

// CodexBinaryAt returns the codex binary of a release:
// $OUTPOST_CODEX_BIN for CodexVersion, or the one scripts/install-codex.sh
// put in .bench/codex-VERSION. The error explains how to get it.
func CodexBinaryAt(version string) (string, error) {
	if p := os.Getenv("OUTPOST_CODEX_BIN"); p != "" && version == CodexVersion {
		return p, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	p := filepath.Join(root, ".bench", "codex-"+version, "node_modules/@openai/codex/vendor/x86_64-unknown-linux-musl/bin/codex")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("codex %s not found (run scripts/install-codex.sh)", version)
	}
	return p, nil
}

// BuildOutpost builds cmd/outpost into dir and returns the binary's path.
func BuildOutpost(dir string) (string, error) {
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "outpost")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/outpost")
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0") // static, as make build and the image
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, out)
	}
	return bin, nil
}

// Server is an exec-server child process.
type Server struct {
	URL    string
	cmd    *exec.Cmd
	stderr *TailBuffer
}

// Start runs argv (an exec-server that prints its ws:// URL as the first
// line of stdout) with extra environment variables.
func Start(ctx context.Context, env []string, argv ...string) (*Server, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	procgroup.Own(cmd)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	tb := NewTailBuffer(64 << 10)
	cmd.Stderr = tb
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &Server{cmd: cmd, stderr: tb}
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, _ := r.ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, r)
	}()
	select {
	case l := <-line:
		if !strings.Contains(l, "://") && !strings.HasPrefix(l, "executor ") {
			s.Stop()
			return nil, fmt.Errorf("%s printed %q, not a URL; stderr: %s", argv[0], l, tb.String())
		}
		s.URL = l
		return s, nil
	case <-ctx.Done():
		s.Stop()
		return nil, fmt.Errorf("%s did not print its URL: %w; stderr: %s", argv[0], ctx.Err(), tb.String())
	}
}

// StartOutpost starts "outpost executor serve" on a loopback port.
func StartOutpost(ctx context.Context, bin string, env ...string) (*Server, error) {
	return Start(ctx, env, bin, "executor", "serve", "--listen", "ws://127.0.0.1:0", "--log-level", "warn")
}

// StartOutpostNative starts "outpost executor serve" on a loopback TCP
// port (Noise + yamux); the URL carries the executor's fingerprint.
func StartOutpostNative(ctx context.Context, bin, stateDir string, env ...string) (*Server, error) {
	return Start(ctx, env, bin, "executor", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", stateDir, "--log-level", "warn")
}

// StartRelay starts "outpost relay serve" on a loopback port; its URL
// (outpost://...#fingerprint) is the server's URL.
func StartRelay(ctx context.Context, bin, stateDir string) (*Server, error) {
	return Start(ctx, nil, bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", stateDir, "--log-level", "warn")
}

// StartJoinedExecutor starts "outpost executor join"; it prints a line
// (not a URL) once it starts joining.
func StartJoinedExecutor(ctx context.Context, bin, relayURL, token, id, stateDir string) (*Server, error) {
	return Start(ctx, nil, bin, "executor", "join", "--relay", relayURL, "--token", token, "--id", id, "--state-dir", stateDir, "--log-level", "warn")
}

// Token creates a relay token with "outpost token create".
func Token(bin, stateDir string, args ...string) (string, error) {
	return TokenEnv(context.Background(), bin, stateDir, nil, args...)
}

// TokenEnv is Token with a context and extra environment variables.
func TokenEnv(ctx context.Context, bin, stateDir string, env []string, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"token", "create", "--state-dir", stateDir}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("outpost token create %s: %w", strings.Join(args, " "), err)
	}
	return strings.TrimSpace(string(out)), nil
}

// BridgeChain is codex's way to an executor behind a relay, each part a
// separate process: `outpost bridge` (codex's ws protocol, on loopback) →
// `outpost relay serve` → `outpost executor join`. Commands run under
// Executor; URL (the bridge's) is for CODEX_EXEC_SERVER_URL.
type BridgeChain struct {
	URL                     string
	Relay, Executor, Bridge *Server
	// ExecutorID and ClientToken reach the joined executor through the
	// relay (another bridge can use them); Env is the chain's XDG
	// directories, for such a bridge.
	ExecutorID, ClientToken string
	Env                     []string
}

// StartBridgeChain starts a relay (state in dir/relay), creates a join and
// a client token, joins an executor with id to it (state in dir/executor),
// waits until it has joined, and starts `outpost bridge` to it through the
// relay. Every process gets XDG_CONFIG_HOME and XDG_STATE_HOME below dir,
// so none of them reads or writes the user's own outpost files.
func StartBridgeChain(ctx context.Context, bin, dir, id string) (_ *BridgeChain, err error) {
	env := []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_STATE_HOME=" + filepath.Join(dir, "state")}
	c := &BridgeChain{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	relayState := filepath.Join(dir, "relay")
	if c.Relay, err = Start(ctx, env, bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", relayState, "--log-level", "warn"); err != nil {
		return nil, fmt.Errorf("relay: %w", err)
	}
	token := func(args ...string) (string, error) { return TokenEnv(ctx, bin, relayState, env, args...) }
	joinTok, err := token("--join", "--uses", "1")
	if err != nil {
		return nil, err
	}
	clientTok, err := token("--client", "--executors", id)
	if err != nil {
		return nil, err
	}
	// At info level: "joined the relay" says when the bridge can reach it.
	if c.Executor, err = Start(ctx, env, bin, "executor", "join", "--relay", c.Relay.URL, "--token", joinTok, "--id", id,
		"--state-dir", filepath.Join(dir, "executor"), "--log-level", "info"); err != nil {
		return nil, fmt.Errorf("executor join: %w", err)
	}
	for !strings.Contains(c.Executor.Stderr(), "joined the relay") {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("executor %s did not join the relay: %w; stderr: %s", id, ctx.Err(), c.Executor.Stderr())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if c.Bridge, err = Start(ctx, env, bin, "bridge", "--relay", c.Relay.URL, "--executor", id, "--token", clientTok,
		"--listen", "ws://127.0.0.1:0", "--log-level", "warn"); err != nil {
		return nil, fmt.Errorf("bridge: %w", err)
	}
	c.URL, c.ExecutorID, c.ClientToken, c.Env = c.Bridge.URL, id, clientTok, env
	return c, nil
}

// Stop stops the bridge, the executor and the relay, in that order.
func (c *BridgeChain) Stop() {
	for _, s := range []*Server{c.Bridge, c.Executor, c.Relay} {
		if s != nil {
			s.Stop()
		}
	}
}

// StartCodex starts "codex exec-server" on a loopback port.
func StartCodex(ctx context.Context, bin string, env ...string) (*Server, error) {
	return Start(ctx, env, bin, "exec-server", "--listen", "ws://127.0.0.1:0")
}

// Stderr returns the tail of what the server wrote to stderr.
func (s *Server) Stderr() string { return s.stderr.String() }

// Pid is the server's process id.
func (s *Server) Pid() int { return s.cmd.Process.Pid }

// Stop sends SIGTERM, waits up to 5 s, then kills the server's group.
func (s *Server) Stop() {
	if s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		procgroup.Kill(s.cmd.Process.Pid)
		<-done
	}
}

// Machine describes this machine for benchmark reports.
func Machine() string {
	model := "unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	return fmt.Sprintf("%s, %d cores, %s/%s, %s", model, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// TailBuffer keeps the last bytes written to it, at most its size: a
// child's stderr, for the message when it fails.
type TailBuffer struct {
	max int
	mu  sync.Mutex
	b   []byte
}

// NewTailBuffer keeps the last max bytes.
func NewTailBuffer(max int) *TailBuffer { return &TailBuffer{max: max} }

func (t *TailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append(t.b[:0], t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *TailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}

// Percentiles returns the p50 and p99 of d in milliseconds.
func Percentiles(d []time.Duration) (p50, p99 float64) {
	if len(d) == 0 {
		return 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / float64(time.Millisecond) }
	return at(0.50), at(0.99)
}
