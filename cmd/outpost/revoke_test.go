package main

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/relay"
)

// waitLog polls buf until it contains want.
func waitLog(t *testing.T, buf *syncBuffer, want string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !strings.Contains(buf.String(), want) {
		if time.Now().After(deadline) {
			t.Fatalf("no %q within %v in:\n%s", want, d, buf.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// joinProc is an `outpost executor join` process.
type joinProc struct {
	log    *syncBuffer
	exited chan struct{} // closed when it has exited; err is then set
	err    error
}

// startJoin runs `outpost executor join` with args.
func startJoin(t *testing.T, args ...string) *joinProc {
	t.Helper()
	cmd := exec.Command(outpostBin, append([]string{"executor", "join"}, args...)...)
	p := &joinProc{log: new(syncBuffer), exited: make(chan struct{})}
	cmd.Stderr = p.log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

// exitCode waits up to d for p to exit and returns its exit code.
func (p *joinProc) exitCode(t *testing.T, d time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(d):
		t.Fatalf("still running after %v:\n%s", d, p.log.String())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(p.err)
	return -1
}

func scrapeCounter(t *testing.T, admin, name string) int {
	t.Helper()
	resp, err := http.Get("http://" + admin + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	m := regexp.MustCompile(`(?m)^` + name + ` (\d+)$`).FindSubmatch(body)
	if m == nil {
		t.Fatalf("no %s in /metrics:\n%s", name, body)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// A stolen executor.key is refused while the executor is up, the refusal
// says what to do, and `outpost executors revoke` — run while the relay
// runs — cuts the key for good; a new key with a new join token rejoins.
func TestExecutorsRevokeCutsAStolenKeyWhileTheRelayRuns(t *testing.T) {
	dir := t.TempDir()
	relayDir := filepath.Join(dir, "relay")
	relayCmd := exec.Command(outpostBin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", relayDir, "--admin-listen", "127.0.0.1:0")
	stdout, _ := relayCmd.StdoutPipe()
	relayLog := new(syncBuffer)
	relayCmd.Stderr = relayLog
	if err := relayCmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { relayCmd.Process.Signal(syscall.SIGTERM); relayCmd.Wait() }()
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "outpost://127.0.0.1:") {
		t.Fatalf("relay printed %q (%v)", line, err)
	}
	relayURL := strings.TrimSpace(line)
	waitLog(t, relayLog, "/metrics", 10*time.Second)
	admin := regexp.MustCompile(`admin: http://(\S+)/metrics`).FindStringSubmatch(relayLog.String())[1]
	token := func() string {
		out, err := exec.Command(outpostBin, "token", "create", "--join", "--uses", "1", "--state-dir", relayDir).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}

	// The executor, then a thief with a copy of its key.
	realDir, thiefDir := filepath.Join(dir, "real"), filepath.Join(dir, "thief")
	real := startJoin(t, "--relay", relayURL, "--token", token(), "--id", "e-1", "--state-dir", realDir)
	waitLog(t, real.log, "joined the relay", 20*time.Second)
	keyBytes, err := os.ReadFile(filepath.Join(realDir, "executor.key"))
	if err != nil {
		t.Fatal(err)
	}
	os.MkdirAll(thiefDir, 0o700)
	if err := os.WriteFile(filepath.Join(thiefDir, "executor.key"), keyBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	stolen, err := identity.Load(filepath.Join(thiefDir, "executor.key"))
	if err != nil {
		t.Fatal(err)
	}
	thief := startJoin(t, "--relay", relayURL, "--id", "e-1", "--state-dir", thiefDir)
	waitLog(t, thief.log, "executor id e-1 is already joined from another connection with this key — if this is not you, your executor.key is stolen: run `outpost executors revoke e-1` on the relay", 20*time.Second)
	waitLog(t, relayLog, "duplicate executor join refused", 5*time.Second)
	if !strings.Contains(relayLog.String(), stolen.PublicKey().Fingerprint()) {
		t.Fatalf("the relay's refusal does not name the key:\n%s", relayLog.String())
	}
	if n := scrapeCounter(t, admin, "outpost_relay_duplicate_joins_total"); n < 1 {
		t.Fatalf("outpost_relay_duplicate_joins_total %d", n)
	}
	if strings.Count(real.log.String(), "joined the relay") != 1 {
		t.Fatalf("the executor lost its session to the thief:\n%s", real.log.String())
	}

	// Revoke, from another process, while the relay runs.
	out, err := exec.Command(outpostBin, "executors", "revoke", "--state-dir", relayDir, "e-1").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "revoked key "+stolen.PublicKey().Fingerprint()+" of executor e-1") {
		t.Fatalf("revoke: %v\n%s", err, out)
	}
	revoked := time.Now()
	if code := real.exitCode(t, 10*time.Second); code != 1 || !strings.Contains(real.log.String(), "has been revoked on this relay") {
		t.Fatalf("executor exit %d:\n%s", code, real.log.String())
	}
	if d := time.Since(revoked); d > 5*time.Second {
		t.Fatalf("the relay cut the revoked key after %v", d)
	}
	// The thief's next retry is refused for good (its backoff may have
	// grown to a few seconds).
	if code := thief.exitCode(t, 40*time.Second); code != 1 || !strings.Contains(thief.log.String(), "has been revoked on this relay") {
		t.Fatalf("thief exit %d:\n%s", code, thief.log.String())
	}
	waitLog(t, relayLog, "executor key revoked: session closed", time.Second)
	if n := scrapeCounter(t, admin, "outpost_relay_revoked_sessions_total"); n != 1 {
		t.Fatalf("outpost_relay_revoked_sessions_total %d", n)
	}

	// The old key cannot join under another id even with a new token.
	again := startJoin(t, "--relay", relayURL, "--token", token(), "--id", "e-2", "--state-dir", thiefDir)
	if code := again.exitCode(t, 20*time.Second); code != 1 || !strings.Contains(again.log.String(), "has been revoked") {
		t.Fatalf("old key as e-2: exit %d:\n%s", code, again.log.String())
	}
	// A new key with a new join token binds e-1 again.
	rejoined := startJoin(t, "--relay", relayURL, "--token", token(), "--id", "e-1", "--state-dir", filepath.Join(dir, "new"))
	waitLog(t, rejoined.log, "joined the relay", 20*time.Second)
	if n := scrapeCounter(t, admin, "outpost_relay_revoked_key_joins_total"); n < 2 {
		t.Fatalf("outpost_relay_revoked_key_joins_total %d", n)
	}
}

func TestExecutorsRevokeHelpAndErrors(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"executors", "revoke", "--help"}, &out, &errb); code != 0 {
		t.Fatalf("--help: exit %d", code)
	}
	for _, want := range []string{"usage: outpost executors revoke [--state-dir DIR] ID", "key for good", "under any id", "known_executors", "-state-dir"} {
		if !strings.Contains(out.String(), want) { // help goes to stdout
			t.Errorf("--help lacks %q:\n%s", want, out.String())
		}
	}
	errb.Reset()
	if code := run([]string{"executors", "revoke"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "usage: outpost executors revoke") {
		t.Fatalf("no id: exit %d %s", code, errb.String())
	}
	errb.Reset()
	if code := run([]string{"executors"}, &out, &errb); code != 2 || !strings.Contains(errb.String(), "outpost executors revoke") {
		t.Fatalf("executors: exit %d %s", code, errb.String())
	}
	errb.Reset()
	relayDir := t.TempDir()
	if _, err := relay.OpenStore(filepath.Join(relayDir, "relay.db")); err != nil {
		t.Fatal(err)
	}
	if code := run([]string{"executors", "revoke", "--state-dir", relayDir, "ghost"}, &out, &errb); code != 1 || !strings.Contains(errb.String(), "no key is bound to that executor id") {
		t.Fatalf("unknown id: exit %d %s", code, errb.String())
	}
}
