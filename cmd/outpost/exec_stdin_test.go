package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// bigStdin is a 64 MiB file of pseudo-random bytes (four times the
// executor's 16 MiB stdin queue) and its sha256.
func bigStdin(t *testing.T) (path, digest string) {
	t.Helper()
	data := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(28, 64))
	for i := 0; i < len(data); i += 8 {
		v := rng.Uint64()
		for j := range 8 {
			data[i+j] = byte(v >> (8 * j))
		}
	}
	path = filepath.Join(t.TempDir(), "stdin.bin")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	return path, hex.EncodeToString(sum[:])
}

// execSha256 runs outpost exec with args, then -- sha256sum, the file at
// path as its stdin; it returns the printed digest, exit status and MB/s.
func execSha256(t *testing.T, env []string, path string, args ...string) (string, int, string, float64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(outpostBin, append(append([]string{"exec"}, args...), "--", "sha256sum")...)
	cmd.Env = env
	cmd.Stdin = f
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- cmd.Run() }()
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		<-done
		t.Fatalf("outpost exec %v hung with 64 MiB on stdin; stderr %q", args, errb.String())
	}
	mbs := float64(64<<20) / 1e6 / time.Since(start).Seconds()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	digest, _, _ := strings.Cut(out.String(), " ")
	return digest, code, errb.String(), mbs
}

// outpost exec -- sha256sum < 64 MiB: every byte reaches the command once
// and in order, EOF follows, the command's digest is the file's; in
// process, direct to an executor and through a relay.
func TestExecForwardsStdinLargerThanTheExecutorsQueue(t *testing.T) {
	path, want := bigStdin(t)
	t.Run("in-process", func(t *testing.T) {
		got, code, stderr, mbs := execSha256(t, os.Environ(), path)
		if code != 0 || got != want {
			t.Fatalf("exit %d, digest %q, want %s; stderr %q", code, got, want, stderr)
		}
		t.Logf("in-process: %.0f MB/s", mbs)
	})
	t.Run("direct", func(t *testing.T) {
		url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
		got, code, stderr, mbs := execSha256(t, os.Environ(), path, "--target", url)
		if code != 0 || got != want {
			t.Fatalf("exit %d, digest %q, want %s; stderr %q", code, got, want, stderr)
		}
		t.Logf("direct: %.0f MB/s", mbs)
	})
	t.Run("relay", func(t *testing.T) {
		rs := startRelayStack(t)
		tok := rs.token("--client", "--executors", "e-*")
		rs.join("e-1")
		args := []string{"--relay", rs.URL, "--executor", "e-1", "--token", tok}
		// The executor is still joining until a trivial exec succeeds.
		deadline := time.Now().Add(20 * time.Second)
		for {
			cmd := exec.Command(outpostBin, append(append([]string{"exec"}, args...), "--", "true")...)
			cmd.Env = rs.Env
			if cmd.Run() == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the executor never joined the relay")
			}
			time.Sleep(50 * time.Millisecond)
		}
		got, code, stderr, mbs := execSha256(t, rs.Env, path, args...)
		if code != 0 || got != want {
			t.Fatalf("exit %d, digest %q, want %s; stderr %q", code, got, want, stderr)
		}
		t.Logf("relay: %.0f MB/s", mbs)
	})
}

// A command that stops reading early ends outpost exec with its own
// status and no complaint about the stdin left unsent.
func TestExecStdinToACommandThatStopsReading(t *testing.T) {
	path, _ := bigStdin(t)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	cmd := exec.Command(outpostBin, "exec", "--", "head", "-c", "10")
	cmd.Stdin = f
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil || out.Len() != 10 || errb.Len() != 0 {
		t.Fatalf("%v: %d bytes out, stderr %q", err, out.Len(), errb.String())
	}
}
