package executor

import (
	"context"
	"errors"
	"sync"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// MockBackend starts scripted processes instead of real ones, so the
// layers above the backend (sessions, transports) can be tested
// deterministically: exact output, exact exit codes, starts that block
// until released, and a record of every stdin write, signal and resize.
type MockBackend struct {
	Retention engine.Retention
	// Script returns the steps a started process performs. Nil: print
	// argv[1:] joined by spaces and a newline on stdout, exit 0.
	Script func(spec engine.Spec) []MockStep
	// BeforeStart, if set, runs inside Start before the process exists; an
	// error fails the start. Tests use it to hold a start open.
	BeforeStart func(ctx context.Context, spec engine.Spec) error

	mu      sync.Mutex
	started []*MockProcess
}

// MockStep is one step of a mock process's script.
type MockStep struct {
	// Output is written to Stream (default stdout; "pty" on a tty).
	Output []byte
	Stream protocol.Stream
	// EchoStdin copies stdin to stdout until stdin is closed.
	EchoStdin bool
	// AwaitSignal blocks until a signal (or terminate) arrives.
	AwaitSignal bool
	// Exit ends the script with Code (later steps still run as late
	// output, as a grandchild holding the pipe would).
	Exit bool
	Code int32
}

// Started returns the processes started so far.
func (b *MockBackend) Started() []*MockProcess {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]*MockProcess(nil), b.started...)
}

// Start runs spec's script.
func (b *MockBackend) Start(ctx context.Context, spec engine.Spec) (engine.Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("argv must not be empty")
	}
	if b.BeforeStart != nil {
		if err := b.BeforeStart(ctx, spec); err != nil {
			return nil, err
		}
	}
	ret := b.Retention
	if ret.MaxBytes == 0 {
		ret = engine.DefaultRetention()
	}
	var steps []MockStep
	if b.Script != nil {
		steps = b.Script(spec)
	} else {
		out := ""
		for i, a := range spec.Argv[1:] {
			if i > 0 {
				out += " "
			}
			out += a
		}
		steps = []MockStep{{Output: []byte(out + "\n")}, {Exit: true}}
	}
	p := &MockProcess{
		Spec:    spec,
		log:     engine.NewEventLog(ret, 1),
		stdin:   make(chan []byte, 128),
		signals: make(chan protocol.Signal, 16),
		killed:  make(chan struct{}),
	}
	b.mu.Lock()
	b.started = append(b.started, p)
	b.mu.Unlock()
	go p.run(steps)
	return p, nil
}

// MockProcess is a scripted process.
type MockProcess struct {
	Spec engine.Spec
	log  *engine.EventLog
	ids  engine.WriteIDs

	stdin   chan []byte
	signals chan protocol.Signal
	killed  chan struct{} // closed by Terminate and Kill: the script stops
	kill    sync.Once

	mu          sync.Mutex
	stdinClosed bool
	exited      bool
	received    []byte
	gotSignals  []protocol.Signal
	sizes       [][2]uint16
}

func (p *MockProcess) run(steps []MockStep) {
	defer p.log.StreamEOF()
	stream := protocol.StreamStdout
	if p.Spec.Tty {
		stream = protocol.StreamPty
	}
	for _, st := range steps {
		select {
		case <-p.killed:
			return
		default:
		}
		switch {
		case st.Exit:
			p.exit(st.Code)
		case st.AwaitSignal:
			select {
			case <-p.signals:
			case <-p.killed:
				return
			}
		case st.EchoStdin:
		echo:
			for {
				select {
				case data, ok := <-p.stdin:
					if !ok {
						break echo
					}
					if _, err := p.log.Append(stream, data); err != nil {
						return
					}
				case <-p.killed:
					return
				}
			}
		case st.Output != nil:
			s := stream
			if st.Stream != "" && !p.Spec.Tty {
				s = st.Stream
			}
			if _, err := p.log.Append(s, append([]byte(nil), st.Output...)); err != nil {
				return
			}
		}
	}
	p.exit(0)
}

func (p *MockProcess) exit(code int32) {
	p.mu.Lock()
	first := !p.exited
	p.exited = true
	p.mu.Unlock()
	if first {
		p.log.Exit(code, false)
	}
}

// Log implements Process.
func (p *MockProcess) Log() *engine.EventLog { return p.log }

// Write implements Process: data goes to EchoStdin steps and is recorded.
func (p *MockProcess) Write(data []byte, writeID string, closeStdin bool) (protocol.WriteStatus, error) {
	if !p.Spec.PipeStdin && !p.Spec.Tty {
		return protocol.WriteStdinClosed, nil
	}
	return p.ids.Accept(writeID, func() (protocol.WriteStatus, error) {
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.stdinClosed {
			return protocol.WriteStdinClosed, nil
		}
		if len(data) > 0 {
			select {
			case p.stdin <- append([]byte(nil), data...):
			default:
				return "", engine.ErrStdinQueueFull
			}
			p.received = append(p.received, data...)
		}
		if closeStdin {
			p.stdinClosed = true
			close(p.stdin)
		}
		return protocol.WriteAccepted, nil
	})
}

// Stdin returns everything written to stdin so far.
func (p *MockProcess) Stdin() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]byte(nil), p.received...)
}

// Signals returns the signals received so far.
func (p *MockProcess) Signals() []protocol.Signal {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]protocol.Signal(nil), p.gotSignals...)
}

// Sizes returns the PTY sizes requested so far.
func (p *MockProcess) Sizes() [][2]uint16 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([][2]uint16(nil), p.sizes...)
}

// Signal implements Process.
func (p *MockProcess) Signal(sig protocol.Signal) error {
	p.mu.Lock()
	p.gotSignals = append(p.gotSignals, sig)
	p.mu.Unlock()
	select {
	case p.signals <- sig:
	default:
	}
	return nil
}

// Resize implements Process.
func (p *MockProcess) Resize(rows, cols uint16) error {
	if !p.Spec.Tty {
		return engine.ErrNotTTY
	}
	p.mu.Lock()
	p.sizes = append(p.sizes, [2]uint16{rows, cols})
	p.mu.Unlock()
	return nil
}

// Terminate implements Process: the script ends with 128+SIGTERM.
func (p *MockProcess) Terminate() bool {
	p.mu.Lock()
	running := !p.exited
	p.mu.Unlock()
	if running {
		p.exit(128 + 15)
		p.kill.Do(func() { close(p.killed) })
	}
	return running
}

// Kill implements Process.
func (p *MockProcess) Kill() {
	p.exit(128 + 9)
	p.kill.Do(func() { close(p.killed) })
}
