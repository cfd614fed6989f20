package executor

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// testTimeout bounds every wait in these tests; a hang fails, not stalls.
const testTimeout = 20 * time.Second

// collect returns every event of p until it closes.
func collect(t *testing.T, p engine.Process) []engine.Event {
	t.Helper()
	sub := p.Log().Subscribe(0, false, nil)
	defer sub.Close()
	deadline := time.After(testTimeout)
	var all []engine.Event
	for {
		evs, gap, done := sub.Next(1000, 1<<30)
		if gap != nil {
			t.Fatalf("unexpected gap %+v", gap)
		}
		all = append(all, evs...)
		if done {
			return all
		}
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("process did not close; events so far: %v", summarize(all))
		}
	}
}

func summarize(evs []engine.Event) string {
	var b strings.Builder
	for _, e := range evs {
		switch e.Kind {
		case engine.EventOutput:
			b.WriteString("out(" + string(e.Stream) + "," + string(e.Data) + ") ")
		default:
			b.WriteString(e.Kind.String() + " ")
		}
	}
	return b.String()
}

// output is what evs wrote on stream ("": every stream).
func output(evs []engine.Event, stream protocol.Stream) string {
	var b bytes.Buffer
	for _, e := range evs {
		if e.Kind == engine.EventOutput && (stream == "" || e.Stream == stream) {
			b.Write(e.Data)
		}
	}
	return b.String()
}

func mustAppend(t *testing.T, l *engine.EventLog, s protocol.Stream, data string) uint64 {
	t.Helper()
	seq, err := l.Append(s, []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	return seq
}
func exitCode(t *testing.T, evs []engine.Event) int32 {
	t.Helper()
	for _, e := range evs {
		if e.Kind == engine.EventExited {
			return e.ExitCode
		}
	}
	t.Fatal("no exit event")
	return 0
}

// waitOutput waits until p's output contains want.
func waitOutput(t *testing.T, p engine.Process, want string) string {
	t.Helper()
	sub := p.Log().Subscribe(0, false, nil)
	defer sub.Close()
	var got bytes.Buffer
	deadline := time.After(testTimeout)
	for {
		evs, _, done := sub.Next(1000, 1<<30)
		for _, e := range evs {
			got.Write(e.Data)
		}
		if strings.Contains(got.String(), want) {
			return got.String()
		}
		if done {
			t.Fatalf("closed without %q; output %q", want, got.String())
		}
		select {
		case <-sub.Ready():
		case <-deadline:
			t.Fatalf("no %q; output %q", want, got.String())
		}
	}
}
