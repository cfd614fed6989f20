//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// dockerProbeEnv makes this test binary a probe that asks the Docker
// socket named in it for /_ping and prints the answer.
const dockerProbeEnv = "OUTPOST_E2E_DOCKER_PROBE"

func TestMain(m *testing.M) {
	if sock := os.Getenv(dockerProbeEnv); sock != "" {
		c, err := net.DialTimeout("unix", sock, 5*time.Second)
		if err != nil {
			fmt.Println("probe: connect failed:", err)
			os.Exit(3)
		}
		fmt.Fprintf(c, "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n")
		b, _ := io.ReadAll(io.LimitReader(c, 4096))
		fmt.Printf("probe: answer %q\n", b)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestSandboxedCommandCannotDriveDocker is the attack of the issue
// "Sandboxes that hold when the executor runs as root": a command in a
// read-only sandbox of a root executor asked the Docker socket to start a
// container with the host's / mounted. outpost exec runs it through an
// in-process executor (root, as CI runs it); without a sandbox the same
// probe gets Docker's answer, so the socket is really there.
func TestSandboxedCommandCannotDriveDocker(t *testing.T) {
	sock := "/var/run/docker.sock"
	if _, err := os.Stat(sock); err != nil {
		testdeps.Missing(t, "docker", "no Docker socket on this machine")
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root, as the executor of the attack ran")
	}
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "outpost-docker-probe-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755) // the sandbox's user must reach the probe
	bin := filepath.Join(dir, "outpost")
	build := exec.Command("go", "build", "-o", bin, "./cmd/outpost")
	build.Dir, build.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	probe := filepath.Join(dir, "probe")
	self, _ := os.ReadFile(os.Args[0])
	if err := os.WriteFile(probe, self, 0o755); err != nil {
		t.Fatal(err)
	}
	exec1 := func(args ...string) string {
		cmd := exec.Command(bin, append(append([]string{"exec", "--env", dockerProbeEnv + "=" + sock}, args...), "--", probe)...)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput()
		return string(out)
	}
	if out := exec1(); !strings.Contains(out, "OK") {
		t.Fatalf("unsandboxed, the probe must reach Docker: %s", out)
	}
	for _, args := range [][]string{{"--sandbox", "read-only"}, {"--sandbox", "workspace-write"}, {"--sandbox", "workspace-write", "--network"}} {
		if out := exec1(args...); strings.Contains(out, "OK") || !strings.Contains(out, "connect failed") {
			t.Fatalf("%v: a sandboxed command reached the Docker socket: %s", args, out)
		}
	}
}
