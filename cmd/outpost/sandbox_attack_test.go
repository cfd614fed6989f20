package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/testdeps"
	"github.com/outpost-exec/outpost/sandbox"
)

// The attack of the issue "Sandboxes that hold when the executor runs as
// root", through a real `outpost executor serve`: a sandboxed command reads
// the executor's key and the client key, and drives the executor's own
// unix:// socket with the outpost CLI to run an unsandboxed command. The
// files are world-readable here, so only the hiding keeps them out of
// reach, not file permissions.
func TestServedExecutorKeepsItsKeysAndSocketFromSandboxes(t *testing.T) {
	if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
		testdeps.Missing(t, "sandbox", "no sandbox here: %v", err)
	}
	if !sandbox.Probe().MountNamespaces {
		testdeps.Missing(t, "userns", "no user namespaces here")
	}
	short := func() string {
		d, err := os.MkdirTemp("", "o")
		if err != nil {
			t.Fatal(err)
		}
		os.Chmod(d, 0o755)
		t.Cleanup(func() { os.RemoveAll(d) })
		return d
	}
	state, xdg, run, tools := short(), short(), short(), short()
	sock := filepath.Join(run, "e.sock")
	os.MkdirAll(filepath.Join(xdg, "outpost"), 0o755)
	os.WriteFile(filepath.Join(xdg, "outpost", "client.key"), []byte("CLIENT-KEY"), 0o644)
	bin := filepath.Join(tools, "outpost")
	b, err := os.ReadFile(outpostBin)
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(bin, b, 0o755) // where the sandbox's user can run it
	// The executor's client configuration is xdg; the test's own client
	// keeps another.
	t.Setenv("XDG_CONFIG_HOME", xdg)
	url, _ := startServe(t, "--listen", "unix://"+sock, "--state-dir", state)
	t.Setenv("XDG_CONFIG_HOME", short())
	os.Chmod(filepath.Join(state, "executor.key"), 0o644)
	os.Chmod(sock, 0o777)
	// Unsandboxed, the command reaches all three: the test is real. (The
	// inner client's key and pin are made here, in the workspace, so that
	// inside the sandbox only the socket can stop it.)
	out, errOut, _ := outpostExec(t, "", "--target", url, "--", "sh", "-c",
		"cat "+state+"/executor.key >/dev/null && echo KEY-READ; cat "+xdg+"/outpost/client.key; XDG_CONFIG_HOME="+tools+"/cfg "+bin+" exec --target "+url+" -- echo SOCKET-DRIVEN")
	if !strings.Contains(out, "KEY-READ") || !strings.Contains(out, "CLIENT-KEY") || !strings.Contains(out, "SOCKET-DRIVEN") {
		t.Fatalf("unsandboxed, the command must reach the files and the socket: %q %q", out, errOut)
	}
	for _, args := range [][]string{{"--sandbox", "read-only"}, {"--sandbox", "workspace-write"}, {"--sandbox", "workspace-write", "--network"}} {
		args = append(append([]string{"--target", url, "--cwd", tools}, args...), "--", "sh", "-c",
			"cat "+state+"/executor.key >/dev/null && echo KEY-READ; cat "+xdg+"/outpost/client.key; XDG_CONFIG_HOME="+tools+"/cfg "+bin+" exec --target "+url+" -- echo SOCKET-DRIVEN")
		out, errOut, _ := outpostExec(t, "", args...)
		if !strings.Contains(errOut, "cannot reach the executor") {
			t.Errorf("%v: the inner client must fail to reach the socket: %q", args, errOut)
		}
		for _, leak := range []string{"KEY-READ", "CLIENT-KEY", "SOCKET-DRIVEN"} {
			if strings.Contains(out, leak) {
				t.Fatalf("%v: %s: %q %q", args, leak, out, errOut)
			}
		}
	}
}
