package main

import (
	"bufio"
	"bytes"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A relay named anywhere — flag, environment, config file — without an
// executor must not run the command on this machine.
func TestExecWithARelayButNoExecutorIsAUsageErrorNotALocalRun(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_EXECUTOR"} {
		unsetenv(t, name)
	}
	relayURL := "outpost://127.0.0.1:1#" + strings.Repeat("A", 43)
	for name, setup := range map[string]func(t *testing.T) []string{
		"flag": func(t *testing.T) []string { return []string{"--relay", relayURL, "--token", "t"} },
		"env": func(t *testing.T) []string {
			t.Setenv("OUTPOST_RELAY", relayURL)
			t.Setenv("OUTPOST_TOKEN", "t")
			return nil
		},
		"config file": func(t *testing.T) []string {
			os.MkdirAll(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "outpost"), 0o700)
			os.WriteFile(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "outpost", "config"), []byte("relay = "+relayURL+"\ntoken = t\n"), 0o600)
			return nil
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Setenv("XDG_CONFIG_HOME", t.TempDir())
			marker := filepath.Join(t.TempDir(), "ran-here")
			args := append(append([]string{"exec"}, setup(t)...), "--", "touch", marker)
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != exitUsage {
				t.Fatalf("exit %d, want %d (stderr %q)", code, exitUsage, errb.String())
			}
			if !strings.Contains(errb.String(), "--executor") {
				t.Fatalf("the error must name --executor: %q", errb.String())
			}
			if _, err := os.Stat(marker); err == nil {
				t.Fatal("the command ran on this machine")
			}
		})
	}
}

func TestRemoteResolutionOrderAndConflicts(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_EXECUTOR"} {
		unsetenv(t, name)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	os.MkdirAll(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "outpost"), 0o700)
	os.WriteFile(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "outpost", "config"), []byte("# mine\nrelay = cfg-relay\ntoken = cfg-token\n"), 0o600)
	resolve := func(args ...string) (remote, error) {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		rf := addRemoteFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return rf.resolve()
	}
	t.Setenv("OUTPOST_EXECUTOR", "env-exec")
	r, err := resolve()
	if err != nil || r.URL != "cfg-relay" || r.Executor != "env-exec" || r.Token != "cfg-token" {
		t.Fatalf("env executor + config relay/token: %+v %v", r, err)
	}
	r, err = resolve("--relay", "flag-relay", "--token", "flag-token")
	if err != nil || r.URL != "flag-relay" || r.Token != "flag-token" || r.Executor != "env-exec" {
		t.Fatalf("flags win: %+v %v", r, err)
	}
	r, err = resolve("--target", "tcp://h:1")
	if err != nil || r.URL != "tcp://h:1" || r.Executor != "" {
		t.Fatalf("an explicit --target wins over the environment's relay: %+v %v", r, err)
	}
	if _, err := resolve("--target", "tcp://h:1", "--executor", "x"); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Fatalf("--target with --executor: %v", err)
	}
	t.Setenv("OUTPOST_EXECUTOR", "")
	os.Remove(filepath.Join(os.Getenv("XDG_CONFIG_HOME"), "outpost", "config"))
	if _, err := resolve("--executor", "x"); err == nil || !strings.Contains(err.Error(), "--executor needs --relay") {
		t.Fatalf("an executor without a relay: %v", err)
	}
	if r, err := resolve(); err != nil || r.URL != "" {
		t.Fatalf("nothing named: this machine, got %+v %v", r, err)
	}
}

// A token in the environment never shows in usage or error output.
func TestUsageNeverPrintsTheToken(t *testing.T) {
	const secret = "opt_SECRET-token-value"
	t.Setenv("OUTPOST_TOKEN", secret)
	t.Setenv("OUTPOST_RELAY", "outpost://secret-relay.example:7443#x")
	for _, args := range [][]string{{"exec", "--nope"}, {"cp", "--nope"}, {"bridge", "--nope"}, {"executors", "ls", "--nope"}, {"exec", "-h"}} {
		var out, errb bytes.Buffer
		run(args, &out, &errb)
		if strings.Contains(out.String()+errb.String(), secret) || strings.Contains(out.String()+errb.String(), "secret-relay") {
			t.Errorf("%v printed a secret:\n%s%s", args, out.String(), errb.String())
		}
	}
}

// --tty passes the terminal's type and the locale, as ssh does.
func TestExecTTYPassesTERMAndTheLocale(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_EXECUTOR"} {
		unsetenv(t, name)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	t.Setenv("TERM", "xterm-outpost-test")
	t.Setenv("LC_MESSAGES", "C.UTF-8")
	out, stderr, code := outpostExec(t, "", "--tty", "--", "sh", "-c", "echo term=$TERM lc=$LC_MESSAGES")
	if code != 0 || !strings.Contains(out, "term=xterm-outpost-test lc=C.UTF-8") {
		t.Fatalf("exit %d, output %q (stderr %q)", code, out, stderr)
	}
	out, _, _ = outpostExec(t, "", "--tty", "--env", "TERM=dumb", "--", "sh", "-c", "echo term=$TERM")
	if !strings.Contains(out, "term=dumb") {
		t.Fatalf("--env must win: %q", out)
	}
}

func TestHelpExitsZeroOnStdout(t *testing.T) {
	for _, args := range [][]string{{"exec", "-h"}, {"help", "exec"}, {"cp", "--help"}, {"executor", "serve", "-h"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || !strings.Contains(out.String(), "-") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out.String(), errb.String())
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"exec", "--nope"}, &out, &errb); code != exitUsage || errb.Len() == 0 {
		t.Errorf("a bad flag: exit %d on stderr %q", code, errb.String())
	}
}

// A command that ignores Ctrl-C is terminated by the second one.
func TestExecSecondCtrlCTerminatesACommandThatIgnoresTheFirst(t *testing.T) {
	cmd := exec.Command(outpostBin, "exec", "--", "sh", "-c", `trap "" INT; echo ready; sleep 30`)
	stdout, _ := cmd.StdoutPipe()
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	if line, _ := bufio.NewReader(stdout).ReadString('\n'); line != "ready\n" {
		t.Fatalf("%q", line)
	}
	// The first is ignored by the command; the second terminates it.
	// Pending signals of one kind coalesce, so they are sent apart, and
	// (a busy machine may still merge two) until the command ends: it must
	// end by the escalation — TERM, or KILL after a third — never sooner.
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(300 * time.Millisecond)
	defer tick.Stop()
	giveUp := time.After(30 * time.Second)
	cmd.Process.Signal(syscall.SIGINT)
	sent := 1
	for {
		select {
		case err := <-done:
			ee, ok := err.(*exec.ExitError)
			if !ok || sent < 2 || (ee.ExitCode() != 128+int(syscall.SIGTERM) && ee.ExitCode() != 128+int(syscall.SIGKILL)) {
				t.Fatalf("exit %v after %d interrupts, want TERM (143) or KILL (137) after 2 or more; stderr %q", err, sent, errb.String())
			}
			return
		case <-tick.C:
			if sent < 4 {
				cmd.Process.Signal(syscall.SIGINT)
				sent++
			}
		case <-giveUp:
			t.Fatalf("%d Ctrl-Cs did not end the command", sent)
		}
	}
}

// An interrupted cp exits 128+SIGINT and leaves no partial file in place.
func TestCpInterruptedExits130(t *testing.T) {
	url, _ := startServe(t, "--listen", "tcp://127.0.0.1:0", "--state-dir", t.TempDir())
	src := filepath.Join(t.TempDir(), "big")
	f, _ := os.Create(src)
	f.Truncate(4 << 30) // sparse: read fast, sent slowly enough to interrupt
	f.Close()
	dst := filepath.Join(t.TempDir(), "dst")
	cmd := exec.Command(outpostBin, "cp", "-q", "--target", url, src, ":"+dst)
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+t.TempDir())
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Under way once the executor has the temporary file it writes to.
	deadline := time.Now().Add(20 * time.Second)
	for {
		if tmp, _ := filepath.Glob(filepath.Join(filepath.Dir(dst), ".dst.outpost-*")); len(tmp) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the transfer never started; stderr %q", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("exit %v, want 130; stderr %q", err, errb.String())
	}
	if _, err := os.Stat(dst); err == nil {
		t.Fatal("a partial file was put in place")
	}
}
