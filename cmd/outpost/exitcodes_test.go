package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/identity"
)

// Mistakes found before connecting are usage errors (2), with a message
// that says what to do; the target in each is a port nothing listens on,
// so a code other than 2 means outpost connected (or tried) first.
func TestMistakesFoundBeforeConnectingAreUsageErrors(t *testing.T) {
	k, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	fp := k.PublicKey().Fingerprint()
	for _, c := range []struct {
		args []string
		hint string // what the message must point to
	}{
		{[]string{"--target", "tcp://127.0.0.1:1#SHA256:zz", "--", "true"}, "fingerprint"},
		{[]string{"--target", "outpsot://127.0.0.1:1#" + fp, "--", "true"}, "did you mean outpost://"},
		{[]string{"--target", "outpost://127.0.0.1:1#" + fp, "--", "true"}, "--relay"},
		{[]string{"--relay", "tcp://127.0.0.1:1", "--executor", "e", "--token", "t", "--", "true"}, "--target"},
		{[]string{"--relay", "outpost://127.0.0.1:1#bad", "--executor", "e", "--", "true"}, "fingerprint"},
		{[]string{"--relay", "outpost://127.0.0.1:1#" + fp, "--executor", "a/b", "--", "true"}, "--executor"},
		{[]string{"--sandbox", "read-onyl", "--target", "tcp://127.0.0.1:1", "--", "true"}, "read-only"},
		{[]string{"--network", "--target", "tcp://127.0.0.1:1", "--", "true"}, "--sandbox"},
	} {
		_, stderr, code := outpostExec(t, "", c.args...)
		if code != exitUsage || !strings.Contains(stderr, c.hint) {
			t.Errorf("%v: exit %d (want %d), stderr %q (want it to mention %q)", c.args, code, exitUsage, stderr, c.hint)
		}
	}
}

// Each way of failing to run a command through a relay has its own exit
// status, decided by the error's kind: refused credentials, an executor
// the relay never had, one that is offline, a relay that is not the one
// named, one that cannot be reached.
func TestExitCodesThroughARelayTellFailuresApart(t *testing.T) {
	rs := startRelayStack(t)
	relayURL, token := rs.URL, rs.token
	clientTok, narrowTok := token("--client", "--executors", "e-*"), token("--client", "--executors", "db-*")
	run := func(args ...string) (string, int) {
		cmd := exec.Command(outpostBin, append([]string{"exec"}, args...)...)
		cmd.Env = rs.Env
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return errb.String(), 0
	}
	startJoined := func(id string) *exec.Cmd {
		join := rs.join(id)
		deadline := time.Now().Add(20 * time.Second)
		for {
			if _, code := run("--relay", relayURL, "--executor", id, "--token", clientTok, "--", "true"); code == 0 {
				return join
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never became reachable", id)
			}
			time.Sleep(50 * time.Millisecond) // still joining
		}
	}
	startJoined("e-1")
	gone := startJoined("e-2")
	gone.Process.Signal(syscall.SIGTERM)
	gone.Wait()

	other, err := identity.Generate()
	if err != nil {
		t.Fatal(err)
	}
	addr := strings.TrimPrefix(relayURL[:strings.IndexByte(relayURL, '#')], "outpost://")
	wrongRelay := "outpost://" + addr + "#" + other.PublicKey().Fingerprint()
	for _, c := range []struct {
		what string
		args []string
		want int
	}{
		{"ran", []string{"--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "sh", "-c", "exit 9"}, 9},
		{"unknown token", []string{"--relay", relayURL, "--executor", "e-1", "--token", "opt_bogus", "--", "true"}, exitRefused},
		{"no token", []string{"--relay", relayURL, "--executor", "e-1", "--", "true"}, exitRefused},
		{"token may not reach it", []string{"--relay", relayURL, "--executor", "e-1", "--token", narrowTok, "--", "true"}, exitRefused},
		{"wrong relay key", []string{"--relay", wrongRelay, "--executor", "e-1", "--token", clientTok, "--", "true"}, exitRefused},
		{"never joined", []string{"--relay", relayURL, "--executor", "e-nosuch", "--token", clientTok, "--", "true"}, exitUnknown},
		{"offline", []string{"--relay", relayURL, "--executor", "e-2", "--token", clientTok, "--", "true"}, exitOffline},
		{"unreachable relay", []string{"--relay", "outpost://127.0.0.1:1#" + other.PublicKey().Fingerprint(), "--executor", "e-1", "--token", clientTok, "--", "true"}, exitTransport},
		{"cwd missing", []string{"--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--cwd", "/nonexistent-4c2e", "--", "true"}, exitCwdMissing},
		{"command not found", []string{"--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "no-such-program-4c2e"}, exitNotFound},
	} {
		stderr, code := run(c.args...)
		if code != c.want {
			t.Errorf("%s: exit %d, want %d (stderr %q)", c.what, code, c.want, stderr)
		}
		if strings.Contains(stderr, clientTok) || strings.Contains(stderr, narrowTok) {
			t.Errorf("%s: stderr shows the token: %q", c.what, stderr)
		}
	}
}

// The first contact with an executor pins its key and says so (ssh's
// accept-new); later contacts are silent; --accept-new=false refuses an
// executor whose key is not pinned yet (118), and a changed key is
// refused (118) naming both keys.
func TestFirstContactPinsAndSaysWhatWasPinned(t *testing.T) {
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	fp := url[strings.IndexByte(url, '#')+1:]
	bare := url[:strings.IndexByte(url, '#')]
	cfg := t.TempDir()
	run := func(args ...string) (string, int) {
		cmd := exec.Command(outpostBin, append([]string{"exec"}, args...)...)
		cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+cfg)
		var errb strings.Builder
		cmd.Stderr = &errb
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok {
			return errb.String(), ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return errb.String(), 0
	}
	if stderr, code := run("--accept-new=false", "--target", bare, "--", "true"); code != exitRefused {
		t.Fatalf("strict first contact: exit %d, want %d (stderr %q)", code, exitRefused, stderr)
	}
	stderr, code := run("--target", bare, "--", "true")
	if code != 0 || !strings.Contains(stderr, "pinned its key "+fp) || !strings.Contains(stderr, filepath.Join(cfg, "outpost", "known_executors")) {
		t.Fatalf("first contact: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := run("--accept-new=false", "--target", bare, "--", "true"); code != 0 || stderr != "" {
		t.Fatalf("second contact: exit %d, stderr %q", code, stderr)
	}
	// Another executor at the same address: its key differs from the pin.
	other, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	otherBare := other[:strings.IndexByte(other, '#')]
	known := filepath.Join(cfg, "outpost", "known_executors")
	b, err := os.ReadFile(known)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(known, []byte(strings.ReplaceAll(string(b), bare, otherBare)), 0o600); err != nil {
		t.Fatal(err)
	}
	if stderr, code := run("--target", otherBare, "--", "true"); code != exitRefused || !strings.Contains(stderr, fp) {
		t.Fatalf("changed key: exit %d, stderr %q", code, stderr)
	}
	// Strict checking always, from the config file; the flag overrides it.
	cfg = t.TempDir()
	os.MkdirAll(filepath.Join(cfg, "outpost"), 0o700)
	if err := os.WriteFile(filepath.Join(cfg, "outpost", "config"), []byte("accept-new = no\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if stderr, code := run("--target", bare, "--", "true"); code != exitRefused {
		t.Fatalf("accept-new = no: exit %d, stderr %q", code, stderr)
	}
	if stderr, code := run("--accept-new", "--target", bare, "--", "true"); code != 0 {
		t.Fatalf("--accept-new over the config file: exit %d, stderr %q", code, stderr)
	}
}

// cp refuses a digest it does not know before connecting, naming the ones
// it knows.
func TestCpUnknownDigestIsAUsageError(t *testing.T) {
	var out, errb strings.Builder
	code := run([]string{"cp", "--digest", "md5", "--target", "tcp://127.0.0.1:1", "a", ":b"}, &out, &errb)
	if code != exitUsage || !strings.Contains(errb.String(), "xxh3-128") || !strings.Contains(errb.String(), "sha256") {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
}
