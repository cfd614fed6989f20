package client

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// A connection that drops under process/start — before the executor
// answered — leaves the start settled on the resumed session, never run
// twice: when the start had arrived the process is found and is this
// one; when it was lost on the way it is sent again.
func TestAStartWhoseConnectionDropsRunsExactlyOnce(t *testing.T) {
	ex := startExecutor(t, nil)
	for _, lost := range []bool{false, true} {
		p := startProxy(t, strings.TrimPrefix(strings.Split(ex.url, "#")[0], "tcp://"))
		env := dial(t, p.url(ex), Config{})
		marks := filepath.Join(t.TempDir(), "runs")
		if lost {
			p.up.Store(true) // the start never reaches the executor
		} else {
			p.down.Store(true) // the executor's answer never comes back
		}
		type result struct {
			proc *Process
			err  error
		}
		done := make(chan result, 1)
		go func() {
			proc, err := env.Start(ctxT(t), protocol.ExecParams{Argv: []string{"/bin/sh", "-c", "echo run >> " + marks + "; echo ran"}, Env: testEnv})
			done <- result{proc, err}
		}()
		if lost {
			time.Sleep(100 * time.Millisecond) // the start is on its way into the hold
		} else {
			waitFor(t, "the start to run", func() bool { _, err := os.Stat(marks); return err == nil })
		}
		p.up.Store(false)
		p.down.Store(false)
		p.cut()
		var r result
		select {
		case r = <-done:
		case <-time.After(testTimeout):
			t.Fatalf("lost=%v: the start never settled", lost)
		}
		if r.err != nil {
			t.Fatalf("lost=%v: start: %v", lost, r.err)
		}
		res, err := r.proc.Wait(ctxT(t))
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("lost=%v: wait: %+v %v", lost, res, err)
		}
		if b, _ := os.ReadFile(marks); string(b) != "run\n" {
			t.Fatalf("lost=%v: the command ran %d times", lost, strings.Count(string(b), "run"))
		}
		env.Close()
	}
}
