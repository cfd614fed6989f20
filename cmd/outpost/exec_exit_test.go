package main

import (
	"bytes"
	"fmt"
	"os/exec"
	"testing"
	"time"
)

// outpost exec through a relay exits without waiting for the relay to echo
// the end of its stream, and loses no output: stdout and stderr arrive
// byte for byte, the exit status too.
func TestExecThroughTheRelayExitsWithAllItsOutput(t *testing.T) {
	rs := startRelayStack(t)
	clientTok := rs.token("--client", "--executors", "e-*")
	rs.join("e-1")
	relayURL, env := rs.URL, rs.Env

	var want, wantErr bytes.Buffer
	for i := 1; i <= 200000; i++ {
		fmt.Fprintf(&want, "%d\n", i)
	}
	for i := 1; i <= 5000; i++ {
		fmt.Fprintf(&wantErr, "%d\n", i)
	}
	run := func() ([]byte, []byte, int) {
		cmd := exec.Command(outpostBin, "exec", "--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--",
			"sh", "-c", "seq 1 200000; seq 1 5000 >&2; exit 7")
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		return out.Bytes(), errb.Bytes(), code
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		out, errb, code := run()
		if code == 7 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("exec through the relay: %d %q %q", code, out[:min(len(out), 100)], errb)
		}
		time.Sleep(50 * time.Millisecond) // the executor is still joining
	}
	for i := range 5 {
		out, errb, code := run()
		if code != 7 || !bytes.Equal(out, want.Bytes()) || !bytes.Equal(errb, wantErr.Bytes()) {
			t.Fatalf("run %d: exit %d, stdout %d bytes (want %d), stderr %d bytes (want %d)", i, code, len(out), want.Len(), len(errb), wantErr.Len())
		}
	}
}
