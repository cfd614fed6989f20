package main

// Tests that need Linux's per-command cgroups and pidfds.

import (
	"bufio"
	"bytes"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/internal/proctest"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// A command's descendants that left its process group with setsid die
// with it on a timeout, and what commands left running dies with the
// executor: each command has a cgroup.
func TestTimeoutAndExecutorShutdownReachDescendantsThatCalledSetsid(t *testing.T) {
	if p := cgroup.ProbeMachine(); p.Unavailable != nil {
		testdeps.Missing(t, "cgroup", "no per-command cgroups here: %v", p.Unavailable)
	}
	url, stop := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir(), "--terminate-grace", "200ms")
	escape := "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!; "
	// run starts outpost exec and watches the escapee (by pidfd: pids are
	// recycled) as soon as it prints its pid, while it surely runs.
	run := func(args ...string) (*proctest.Proc, int) {
		cmd := exec.Command(outpostBin, append([]string{"exec", "--target", url}, args...)...)
		stdout, _ := cmd.StdoutPipe()
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		line, err := bufio.NewReader(stdout).ReadString('\n')
		pid, perr := strconv.Atoi(strings.TrimSpace(line))
		if err != nil || perr != nil {
			cmd.Wait()
			t.Fatalf("no pid (%q, %v): %s", line, err, stderr.String())
		}
		escaped := proctest.Watch(t, pid)
		cmd.Wait()
		return escaped, cmd.ProcessState.ExitCode()
	}
	// Sandboxed commands get one too (the helper is born in it).
	out, stderr, code := outpostExec(t, "", "--target", url, "--sandbox", "workspace-write", "--", "cat", "/proc/self/cgroup")
	if code != 0 || !regexp.MustCompile(`(?m)^0::/.*outpost-[0-9]+/cmd-[0-9]+$`).MatchString(out) {
		t.Fatalf("a sandboxed command's cgroup: exit %d\n%s%s", code, out, stderr)
	}
	escaped, code := run("--timeout", "300ms", "--", "sh", "-c", escape+"sleep 300")
	if code != 124 {
		t.Fatalf("exit %d, want 124", code)
	}
	if !escaped.WaitGone(20 * time.Second) {
		t.Fatal("the escapee survived the timeout")
	}
	left, code := run("--", "sh", "-c", escape+"exit 0")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	if left.Gone() {
		t.Fatal("the background process died with its command")
	}
	stop()
	if !left.WaitGone(20 * time.Second) {
		t.Fatal("the background process survived the executor")
	}
}
