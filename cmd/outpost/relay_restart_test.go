package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// freeLoopbackAddr picks a loopback HOST:PORT nothing listens on now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// restartRelay is one `outpost relay serve` process of the restart test.
type restartRelay struct {
	cmd  *exec.Cmd
	log  *syncBuffer
	out  *bufio.Reader
	done chan struct{} // closed once the process has exited, with err
	err  error
}

func startRestartRelay(t *testing.T, args ...string) *restartRelay {
	t.Helper()
	r := &restartRelay{cmd: exec.Command(outpostBin, append([]string{"relay", "serve"}, args...)...), log: new(syncBuffer), done: make(chan struct{})}
	stdout, _ := r.cmd.StdoutPipe()
	r.cmd.Stderr = r.log
	r.out = bufio.NewReader(stdout)
	if err := r.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { r.err = r.cmd.Wait(); close(r.done) }()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// url reads the URL the relay prints once it listens.
func (r *restartRelay) url(t *testing.T) string {
	t.Helper()
	line, err := r.out.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "outpost://") {
		t.Fatalf("relay printed %q (%v)\n%s", line, err, r.log.String())
	}
	return strings.TrimSpace(line)
}

// A relay restarted on the same host while the old process drains: the
// new one binds the same --listen and --admin-listen ports — whether it
// starts once the old one has begun its drain or a moment before the old
// one is told to stop (it waits for the ports) — and serves (its /readyz, executors rejoining it,
// new commands), while the old one lets the command open through it run
// to its end and then exits.
func TestARelayRestartedOnTheSameHostStartsWhileTheOldOneDrains(t *testing.T) {
	for _, order := range []string{"new after the drain began", "new before the old is signalled"} {
		t.Run(strings.ReplaceAll(order, " ", "_"), func(t *testing.T) {
			dir := t.TempDir()
			state := filepath.Join(dir, "relay")
			listen, adminAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
			args := []string{"--listen", "tcp://" + listen, "--admin-listen", adminAddr, "--state-dir", state, "--drain-timeout", "20s"}
			old := startRestartRelay(t, args...)
			relayURL := old.url(t)
			token := func(args ...string) string {
				out, err := exec.Command(outpostBin, append([]string{"token", "create", "--state-dir", state}, args...)...).Output()
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(out))
			}
			joinTok, clientTok := token("--join"), token("--client")
			env := append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"))
			join := exec.Command(outpostBin, "executor", "join", "--relay", relayURL, "--token", joinTok, "--id", "e-1", "--state-dir", filepath.Join(dir, "exec"))
			joinLog := new(syncBuffer)
			join.Stderr = joinLog
			if err := join.Start(); err != nil {
				t.Fatal(err)
			}
			defer func() { join.Process.Signal(syscall.SIGTERM); join.Wait() }()
			deadline := time.Now().Add(20 * time.Second)
			waitLog := func(what string, log *syncBuffer, n int) {
				t.Helper()
				for strings.Count(log.String(), what) < n {
					if time.Now().After(deadline) {
						t.Fatalf("no %q (%d times) in:\n%s", what, n, log.String())
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
			waitLog("joined the relay", joinLog, 1)

			// A command open through the old relay keeps it draining.
			cmd := exec.Command(outpostBin, "exec", "--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "sh", "-c", "echo started; read x; echo finished")
			cmd.Env = env
			stdin, _ := cmd.StdinPipe()
			out, _ := cmd.StdoutPipe()
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(out)
			if l, err := r.ReadString('\n'); l != "started\n" {
				t.Fatalf("%q %v", l, err)
			}

			var next *restartRelay
			if order == "new before the old is signalled" {
				// It finds the ports taken, waits, and gets them once the
				// old one, signalled then, begins its drain.
				next = startRestartRelay(t, args...)
				waitLog("the address is in use; waiting", next.log, 1)
				old.cmd.Process.Signal(syscall.SIGTERM)
			} else {
				old.cmd.Process.Signal(syscall.SIGTERM)
				waitLog("relay asked to reconnect", joinLog, 1)
				next = startRestartRelay(t, args...)
			}
			if got := next.url(t); got != relayURL {
				t.Fatalf("the new relay prints %s, the old one printed %s", got, relayURL)
			}
			select {
			case <-old.done:
				t.Fatalf("the old relay exited with a command open: %v\n%s", old.err, old.log.String())
			default:
			}
			// The admin port is the new relay's: it answers ready.
			resp, err := http.Get("http://" + adminAddr + "/readyz")
			if err != nil {
				t.Fatalf("the new relay's admin port: %v\n%s", err, next.log.String())
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("/readyz on the shared admin port: %d %q (the draining relay's?)", resp.StatusCode, body)
			}
			// The executor rejoins, at the new relay, and a new command runs
			// through it.
			waitLog("joined the relay", joinLog, 2)
			fresh := exec.Command(outpostBin, "exec", "--relay", relayURL, "--executor", "e-1", "--token", clientTok, "--", "echo", "through the new relay")
			fresh.Env = env
			if got, err := fresh.Output(); err != nil || string(got) != "through the new relay\n" {
				t.Fatalf("a command through the new relay: %q %v\n%s", got, err, next.log.String())
			}

			// The old command runs to its end through the draining relay,
			// which then exits.
			io.WriteString(stdin, "go\n")
			stdin.Close()
			if l, err := r.ReadString('\n'); l != "finished\n" {
				t.Fatalf("the command through the draining relay: %q %v", l, err)
			}
			if err := cmd.Wait(); err != nil {
				t.Fatalf("exec: %v", err)
			}
			select {
			case <-old.done:
				if old.err != nil || !strings.Contains(old.log.String(), "relay drained") {
					t.Fatalf("old relay exit %v\n%s", old.err, old.log.String())
				}
			case <-time.After(15 * time.Second):
				t.Fatalf("the old relay did not exit after its last stream ended\n%s", old.log.String())
			}
			select {
			case <-next.done:
				t.Fatalf("the new relay exited: %v\n%s", next.err, next.log.String())
			default:
			}
		})
	}
}
