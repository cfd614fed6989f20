//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// bringUpCommands are the lines of the sh block that follows the
// "bring-up" marker in deploy/README.md: the test runs what the operator is
// told to run, so the two cannot drift apart.
func bringUpCommands(t *testing.T, root string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "deploy/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile("(?s)<!-- bring-up[^>]*-->\\s*```sh\n(.*?)```").FindSubmatch(b)
	if m == nil {
		t.Fatal("deploy/README.md has no sh block after its bring-up marker")
	}
	var cmds []string
	for _, line := range strings.Split(string(m[1]), "\n") {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// The operator's stack (deploy/) comes up with the two documented
// commands, runs commands through the relay, and keeps its identities
// across recreated containers and a process that exits.
func TestDeployStackComesUpAndSurvivesRecreate(t *testing.T) {
	if _, err := os.Stat("/var/run/docker.sock"); err != nil {
		testdeps.Missing(t, "docker", "no Docker engine")
	}
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	cmds := bringUpCommands(t, root)
	if len(cmds) != 2 {
		t.Fatalf("the README's bring-up is %d commands, not two: %q", len(cmds), cmds)
	}
	// A project, image tag and host port of the test's own, so that an
	// operator's stack on this machine is left alone.
	n := time.Now().UnixNano() % 1e6
	project, tag := fmt.Sprintf("outpost-deploy-%d", n), fmt.Sprintf("outpost:deploy-e2e-%d", n)
	env := []string{"COMPOSE_PROJECT_NAME=" + project, "OUTPOST_IMAGE=" + tag, "OUTPOST_RELAY_PORT=127.0.0.1:"}
	compose := func(args ...string) (string, error) {
		return run(t, root, env, "docker-compose", append([]string{"-f", "deploy/docker-compose.yml"}, args...)...)
	}
	t.Cleanup(func() {
		if t.Failed() {
			out, _ := compose("logs", "--no-color")
			t.Logf("compose logs:\n%s", out)
		}
		compose("down", "-v", "--remove-orphans")
		run(t, "", nil, "docker", "rmi", "-f", tag)
	})
	start := time.Now()
	for _, c := range cmds {
		if out, err := run(t, root, env, "sh", "-c", c); err != nil {
			t.Fatalf("%s: %v\n%s", c, err, out)
		}
	}
	t.Logf("bring-up took %v", time.Since(start).Round(time.Second))

	// The client service runs a command on exec1 through the relay (the
	// executor may still be joining: poll with a deadline).
	runOnExec1 := func(what string) {
		t.Helper()
		var out string
		var err error
		for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(time.Second) {
			out, err = compose("run", "--rm", "-T", "client", "exec", "--executor", "exec1", "--", "sh", "-c", "echo ran-on $(hostname)")
			if err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil || !strings.Contains(out, "ran-on ") {
			t.Fatalf("%s: a command on exec1: %v\n%s", what, err, out)
		}
	}
	// The relay's fingerprint (relay init keeps the key and prints it) and
	// exec1's key as the relay lists it.
	relayFP := func() string {
		t.Helper()
		out, err := compose("exec", "-T", "relay", "outpost", "relay", "init", "--state-dir", "/state")
		fp := regexp.MustCompile(`(?m)^[A-Za-z0-9_-]{43}$`).FindString(out)
		if err != nil || fp == "" {
			t.Fatalf("relay init in the relay: %v\n%s", err, out)
		}
		return fp
	}
	exec1Key := func() string {
		t.Helper()
		out, err := compose("run", "--rm", "-T", "client", "executors", "ls")
		m := regexp.MustCompile(`(?m)^exec1\s+(\S+)`).FindStringSubmatch(out)
		if err != nil || m == nil {
			t.Fatalf("executors ls: %v\n%s", err, out)
		}
		return m[1]
	}
	containerID := func(svc string) string {
		out, err := compose("ps", "-q", svc)
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(out)
	}

	runOnExec1("after bring-up")
	fp, key := relayFP(), exec1Key()
	for _, svc := range []string{"exec1", "relay"} {
		before := containerID(svc)
		if out, err := compose("up", "-d", "--force-recreate", svc); err != nil {
			t.Fatalf("up -d --force-recreate %s: %v\n%s", svc, err, out)
		}
		if containerID(svc) == before {
			t.Fatalf("%s was not recreated", svc)
		}
		// The client pinned exec1's key at first contact: a new key would
		// be refused, so this run also proves the key survived.
		runOnExec1("after recreating " + svc)
		if got := relayFP(); got != fp {
			t.Fatalf("the relay's fingerprint changed when %s was recreated: %s, was %s", svc, got, fp)
		}
		if got := exec1Key(); got != key {
			t.Fatalf("exec1's key changed when %s was recreated: %s, was %s", svc, got, key)
		}
	}

	// restart: unless-stopped: an executor whose process exits comes back.
	id := containerID("exec1")
	restarts := func() string {
		out, _ := run(t, "", nil, "docker", "inspect", "-f", "{{.RestartCount}}", id)
		return strings.TrimSpace(out)
	}
	if r := restarts(); r != "0" {
		t.Fatalf("exec1 restarted %s times before it was told to exit", r)
	}
	if out, err := compose("exec", "-T", "exec1", "kill", "-TERM", "1"); err != nil {
		t.Fatalf("TERM to exec1's outpost: %v\n%s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); restarts() == "0"; time.Sleep(500 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("exec1 exited and was not restarted")
		}
	}
	runOnExec1("after exec1's process exited")
	t.Logf("whole test %v", time.Since(start).Round(time.Second))
}
