package main

import (
	"bufio"
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/transport"
)

// outpostCmd runs the outpost binary with args and returns its stdout,
// stderr and exit code.
func outpostCmd(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(outpostBin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return out.String(), errb.String(), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return out.String(), errb.String(), 0
}

// startRelayServe runs `outpost relay serve` with args and returns the
// lines it printed on stdout before its stdout went quiet (its URLs), read
// up to want lines, and its stderr.
func startRelayServe(t *testing.T, want int, args ...string) (urls []string, stderr *syncBuffer) {
	t.Helper()
	cmd := exec.Command(outpostBin, append([]string{"relay", "serve"}, args...)...)
	stdout, _ := cmd.StdoutPipe()
	stderr = new(syncBuffer)
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	r := bufio.NewReader(stdout)
	for range want {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("relay serve printed %q (%v); stderr:\n%s", urls, err, stderr.String())
		}
		urls = append(urls, strings.TrimSpace(line))
	}
	return urls, stderr
}

// The relay's fingerprint is known before its first start: init makes the
// key and the token database, prints the URL, and the relay started
// afterwards serves under exactly that key — and an executor given the
// init's URL joins it.
func TestRelayInitMakesTheKeyBeforeTheFirstStart(t *testing.T) {
	dir := t.TempDir()
	state := filepath.Join(dir, "relay")
	out, errOut, code := outpostCmd(t, nil, "relay", "init", "--state-dir", state, "--advertise", "relay.example.net:7443")
	if code != 0 {
		t.Fatalf("relay init: exit %d: %s", code, errOut)
	}
	initURL, err := transport.ParseURL(strings.TrimSpace(out), transport.SchemeRelay)
	if err != nil || initURL.Addr != "relay.example.net:7443" || strings.Count(out, "\n") != 1 {
		t.Fatalf("relay init printed %q: %v", out, err)
	}
	key, err := identity.Load(filepath.Join(state, "relay.key"))
	if err != nil {
		t.Fatal(err)
	}
	if key.PublicKey() != initURL.Key {
		t.Fatalf("the URL's fingerprint %s is not the key's %s", initURL.Fingerprint, key.PublicKey().Fingerprint())
	}
	for _, f := range []string{"relay.key", "relay.db"} {
		fi, err := os.Stat(filepath.Join(state, f))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s: %v %v", f, fi, err)
		}
	}
	keyBytes, _ := os.ReadFile(filepath.Join(state, "relay.key"))

	// Tokens can be minted before the relay runs (the database exists).
	joinTok, errOut, code := outpostCmd(t, nil, "token", "create", "--join", "--uses", "1", "--state-dir", state)
	if code != 0 {
		t.Fatalf("token create: exit %d %s", code, errOut)
	}

	urls, _ := startRelayServe(t, 1, "--listen", "tcp://127.0.0.1:0", "--state-dir", state)
	served, err := transport.ParseURL(urls[0], transport.SchemeRelay)
	if err != nil || served.Key != initURL.Key {
		t.Fatalf("relay serve printed %q, init promised %s (%v)", urls[0], initURL.Fingerprint, err)
	}
	// An executor given the init's fingerprint (at the relay's real
	// address) joins, its token from the environment as deploy/ gives it.
	joinURL := transport.RelayScheme + served.Addr + "#" + initURL.Fingerprint
	t.Setenv("OUTPOST_JOIN_TOKEN", strings.TrimSpace(joinTok))
	j := startJoin(t, "--relay", joinURL, "--id", "e-1", "--state-dir", filepath.Join(dir, "exec"))
	waitLog(t, j.log, "joined the relay", 20*time.Second)

	// init again, with the relay running: the key is kept, byte for byte.
	out, errOut, code = outpostCmd(t, nil, "relay", "init", "--state-dir", state)
	if code != 0 || strings.TrimSpace(out) != initURL.Fingerprint || !strings.Contains(errOut, "kept") {
		t.Fatalf("second init: exit %d, printed %q, %s", code, out, errOut)
	}
	if again, _ := os.ReadFile(filepath.Join(state, "relay.key")); !bytes.Equal(again, keyBytes) {
		t.Fatal("a second relay init rewrote relay.key")
	}
}

// init never replaces a key: not one made by many inits racing, not one it
// cannot read, not one whose permissions are too loose.
func TestRelayInitNeverReplacesAKey(t *testing.T) {
	state := filepath.Join(t.TempDir(), "relay")
	const n = 8
	var wg sync.WaitGroup
	fps, errs, codes := make([]string, n), make([]string, n), make([]int, n)
	for i := range n {
		wg.Go(func() {
			fps[i], errs[i], codes[i] = outpostCmd(t, nil, "relay", "init", "--state-dir", state)
		})
	}
	wg.Wait()
	created := 0
	for i := range n {
		if codes[i] != 0 || fps[i] != fps[0] {
			t.Fatalf("racing inits: exit %d, fingerprint %q vs %q: %s", codes[i], fps[i], fps[0], errs[i])
		}
		if strings.Contains(errs[i], "created") {
			created++
		}
	}
	if created != 1 {
		t.Fatalf("%d racing inits say they created the key", created)
	}

	for name, setup := range map[string]func(path string){
		"loose permissions": func(path string) { os.Chmod(path, 0o644) },
		"not a key":         func(path string) { os.WriteFile(path, []byte("not a key\n"), 0o600) },
	} {
		t.Run(name, func(t *testing.T) {
			state := t.TempDir()
			path := filepath.Join(state, "relay.key")
			if _, _, err := identity.LoadOrCreate(path); err != nil {
				t.Fatal(err)
			}
			setup(path)
			before, _ := os.ReadFile(path)
			out, errOut, code := outpostCmd(t, nil, "relay", "init", "--state-dir", state)
			if code != 1 || out != "" {
				t.Fatalf("exit %d, printed %q: %s", code, out, errOut)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatal("relay init replaced a key it could not use")
			}
		})
	}
}

// --advertise must be an address another machine can dial; anything else
// is a usage error before any state is made.
func TestRelayInitAndServeRefuseUndialableAdvertise(t *testing.T) {
	for _, adv := range []string{"0.0.0.0:7443", "[::]:7443", ":7443", "relay", "relay:0", "relay:65536", "relay:http", "outpost://relay:7443", "relay:7443/x", "relay:7443#fp", "re lay:7443"} {
		state := filepath.Join(t.TempDir(), "relay")
		out, errOut, code := outpostCmd(t, nil, "relay", "init", "--state-dir", state, "--advertise", adv)
		if code != 2 || out != "" || !strings.Contains(errOut, "--advertise") {
			t.Errorf("relay init --advertise %q: exit %d, printed %q: %s", adv, code, out, errOut)
		}
		if _, err := os.Stat(state); !os.IsNotExist(err) {
			t.Errorf("relay init --advertise %q made the state directory", adv)
		}
		_, errOut, code = outpostCmd(t, nil, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", state, "--advertise", adv)
		if code != 2 || !strings.Contains(errOut, "--advertise") {
			t.Errorf("relay serve --advertise %q: exit %d: %s", adv, code, errOut)
		}
	}
	// An IPv6 address keeps its brackets, and the URL parses.
	out, errOut, code := outpostCmd(t, nil, "relay", "init", "--state-dir", t.TempDir(), "--advertise", "[2001:db8::1]:7443")
	u, err := transport.ParseURL(strings.TrimSpace(out), transport.SchemeRelay)
	if code != 0 || err != nil || u.Addr != "[2001:db8::1]:7443" {
		t.Fatalf("IPv6: exit %d, %q, %v: %s", code, out, err, errOut)
	}
}

func TestRelayInitUsage(t *testing.T) {
	out, _, code := outpostCmd(t, nil, "relay", "init", "--help")
	if code != 0 || !strings.Contains(out, "usage: outpost relay init") || !strings.Contains(out, "-advertise") {
		t.Fatalf("--help: exit %d:\n%s", code, out)
	}
	if _, errOut, code := outpostCmd(t, nil, "relay", "init", "--state-dir", t.TempDir(), "extra"); code != 2 || !strings.Contains(errOut, "usage: outpost relay init") {
		t.Fatalf("stray argument: exit %d: %s", code, errOut)
	}
	if _, errOut, code := outpostCmd(t, nil, "relay"); code != 2 || !strings.Contains(errOut, "relay init") {
		t.Fatalf("relay alone: exit %d: %s", code, errOut)
	}
}

// A relay listening on every address prints a URL naming this machine,
// never the wildcard, and says how to name it otherwise; --advertise
// prints exactly what was given.
func TestRelayServePrintsADialableURL(t *testing.T) {
	urls, stderr := startRelayServe(t, 2, "--listen", "tcp://0.0.0.0:0", "--ws-listen", "ws://0.0.0.0:0", "--state-dir", t.TempDir())
	host, _ := os.Hostname()
	for _, raw := range urls {
		u, err := transport.ParseURL(raw, transport.SchemeRelay, transport.SchemeRelayWS)
		if err != nil {
			t.Fatalf("%q: %v", raw, err)
		}
		h, port, _ := net.SplitHostPort(u.Addr)
		if isWildcardHost(h) || h != host || port == "0" {
			t.Fatalf("a wildcard listener printed %q, want host %q", raw, host)
		}
		// Where this machine's name resolves, the URL really dials.
		if _, err := net.LookupHost(h); err == nil {
			c, err := net.DialTimeout("tcp", u.Addr, 5*time.Second)
			if err != nil {
				t.Fatalf("the printed %q does not dial: %v", raw, err)
			}
			c.Close()
		}
	}
	if !strings.Contains(stderr.String(), "--advertise HOST:PORT") {
		t.Fatalf("no hint to use --advertise:\n%s", stderr.String())
	}

	urls, stderr = startRelayServe(t, 2, "--listen", "tcp://127.0.0.1:0", "--ws-listen", "ws://0.0.0.0:0", "--state-dir", t.TempDir(), "--advertise", "relay.example.net:7443")
	if !strings.HasPrefix(urls[0], "outpost://relay.example.net:7443#") || !strings.HasPrefix(urls[1], "outpost+ws://relay.example.net:") {
		t.Fatalf("--advertise: printed %q", urls)
	}
	if strings.Contains(stderr.String(), "--advertise HOST:PORT") {
		t.Fatalf("a hint despite --advertise:\n%s", stderr.String())
	}
}

// The join token may come from the environment (as deploy/ passes it);
// help, which prints flag defaults, must not show it.
func TestExecutorJoinUsageNeverShowsTheJoinToken(t *testing.T) {
	const secret = "opt_join_secret_never_printed"
	env := []string{"OUTPOST_JOIN_TOKEN=" + secret}
	for _, args := range [][]string{{"executor", "join", "--help"}, {"executor", "join", "--no-such-flag"}, {"executor", "join"}} {
		out, errOut, _ := outpostCmd(t, env, args...)
		if strings.Contains(out+errOut, secret) {
			t.Fatalf("%v printed the join token:\n%s%s", args, out, errOut)
		}
	}
}
