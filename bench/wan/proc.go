package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/bench/wan/netem"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
)

// proc is a long-running child (a server) in a namespace.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stderr *peers.TailBuffer
	done   chan struct{}
}

// command prepares argv in its own process group, killed with us
// (Pdeathsig) and with ctx (the whole group), with the harness's
// environment plus env.
func command(ctx context.Context, env []string, argv ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	procgroup.KillOnCancel(cmd)
	cmd.WaitDelay = 2 * time.Second
	return cmd
}

// startProc starts argv in ns. With firstLine, it waits (up to 30 s) for
// the first line of stdout — a server's URL — and returns it.
func startProc(ctx context.Context, ns *netem.NS, name string, env []string, firstLine bool, argv ...string) (*proc, string, error) {
	// Not ctx: a server outlives the step that starts it; stop() ends it.
	cmd := command(context.Background(), env, argv...)
	p := &proc{name: name, cmd: cmd, stderr: peers.NewTailBuffer(64 << 10), done: make(chan struct{})}
	cmd.Stderr = p.stderr
	var stdout io.ReadCloser
	if firstLine {
		var err error
		if stdout, err = cmd.StdoutPipe(); err != nil {
			return nil, "", err
		}
	}
	if err := ns.Start(cmd); err != nil {
		return nil, "", fmt.Errorf("%s: %w", name, err)
	}
	go func() { cmd.Wait(); close(p.done) }()
	if !firstLine {
		return p, "", nil
	}
	line := make(chan string, 1)
	go func() {
		r := bufio.NewReader(stdout)
		l, _ := r.ReadString('\n')
		line <- strings.TrimSpace(l)
		io.Copy(io.Discard, r) // a server's later output: read, not kept
	}()
	select {
	case l := <-line:
		if l == "" {
			p.stop()
			return nil, "", fmt.Errorf("%s printed nothing; stderr: %s", name, p.stderr)
		}
		return p, l, nil
	case <-time.After(30 * time.Second):
	case <-ctx.Done():
	}
	p.stop()
	return nil, "", fmt.Errorf("%s did not print its URL; stderr: %s", name, p.stderr)
}

// waitStderr waits until the process has logged s.
func (p *proc) waitStderr(ctx context.Context, s string, timeout time.Duration) error {
	deadline := time.After(timeout)
	for !strings.Contains(p.stderr.String(), s) {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited; stderr: %s", p.name, p.stderr)
		case <-ctx.Done():
			return ctx.Err()
		case <-deadline:
			return fmt.Errorf("%s did not log %q within %v; stderr: %s", p.name, s, timeout, p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
	return nil
}

// stop sends SIGTERM to the group, then SIGKILL after 3 s.
func (p *proc) stop() {
	if p == nil || p.cmd.Process == nil {
		return
	}
	procgroup.Term(p.cmd.Process.Pid)
	select {
	case <-p.done:
	case <-time.After(3 * time.Second):
		procgroup.Kill(p.cmd.Process.Pid)
		<-p.done
	}
}

func (p *proc) pid() int { return p.cmd.Process.Pid }

// cpuSeconds is a process's user+system CPU time so far, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s on Linux).
func cpuSeconds(pid int) (float64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := strings.LastIndexByte(string(data), ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(string(data[i+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f)+2)
	}
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		return 0, err
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		return 0, err
	}
	return float64(ut+st) / 100, nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " / ")
}
