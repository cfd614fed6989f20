package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

// outpost exec's exit code for a refused start comes from the error's
// kind, whatever its message says.
func TestStartFailureExitCodeFollowsTheKind(t *testing.T) {
	for _, c := range []struct {
		err  error
		want int
	}{
		{protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest, "cannot be done here"), exitSandbox},
		{protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInternal, "nothing by that name"), exitNotFound},
		{protocol.KindErrorf(protocol.KindPermission, protocol.CodeInternal, "not found in the sandbox"), exitSpawn},
		{protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "sandbox: no such mode"), exitSpawn},
		{protocol.KindErrorf(protocol.KindExhausted, protocol.CodeInvalidRequest, "too many processes"), exitSpawn},
		{fmt.Errorf("start: %w", protocol.KindErrorf(protocol.KindNotFound, protocol.CodeInternal, "x")), exitNotFound},
		{&client.SpawnError{Err: protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest, "x")}, exitSandbox},
		{protocol.Errorf(protocol.CodeInternal, "a peer without kinds: sandbox, not found, no such file"), exitSpawn},
		{errors.New("connection reset: sandbox not found"), exitTransport},
	} {
		if got := startFailure(c.err, io.Discard); got != c.want {
			t.Errorf("%v (kind %q): exit %d, want %d", c.err, protocol.KindOf(c.err), got, c.want)
		}
	}
}

// A program in no directory of the command's PATH is "not found" (127),
// like one at a missing path; a missing working directory is told apart
// (119), and a file that is no program cannot be started (126).
func TestExecNotFoundExitCodes(t *testing.T) {
	notExec := filepath.Join(t.TempDir(), "data.txt")
	if err := os.WriteFile(notExec, []byte("just text\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want int
	}{
		{[]string{"--", "no-such-program-5b1d"}, exitNotFound},
		{[]string{"--", "/nonexistent/cmd"}, exitNotFound},
		{[]string{"--cwd", "/nonexistent-dir-5b1d", "--", "true"}, exitCwdMissing},
		{[]string{"--cwd", notExec, "--", "true"}, exitCwdMissing},
		{[]string{"--", notExec}, exitSpawn},
	} {
		if _, stderr, code := outpostExec(t, "", c.args...); code != c.want {
			t.Errorf("%v: exit %d, want %d (stderr %q)", c.args, code, c.want, stderr)
		}
	}
}
