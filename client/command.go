package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/outpost-exec/outpost/protocol"
)

// Cmd runs a command on an executor; it is shaped like os/exec.Cmd, so
// code written for os/exec ports field for field: Path, Args, Env, Dir,
// Stdin, Stdout, Stderr.
type Cmd struct {
	// Executor is where the command runs: an executor reached with Dial,
	// or this machine (package local). (Env is not it: Env holds the
	// environment variables, as in os/exec.)
	Executor Environment
	// Path is the program: a name looked up in the child's PATH on the
	// executor, or a path there.
	Path string
	Args []string // Args[0] is the program as the child sees it
	// Dir is the working directory on the executor (a path or file: URI);
	// "" is the executor's own.
	Dir string
	// Env is the child's environment, "KEY=VALUE" entries, as in os/exec:
	//
	//   - nil: the executor's environment, as `outpost exec` gives it —
	//     its core variables (PATH, HOME, USER, LOGNAME, SHELL, TMPDIR,
	//     TMP, TEMP, LANG, LC_ALL, LC_CTYPE). The executor's, not this
	//     process's: os/exec's parent is here the executor.
	//   - non-nil: exactly these variables (the last of a repeated key
	//     wins); with InheritEnv, laid over the executor's instead.
	//
	// So os/exec's cmd.Env = append(os.Environ(), "K=V") — which would
	// send this machine's variables to another — is here cmd.Env =
	// []string{"K=V"} with InheritEnv.
	Env []string
	// InheritEnv lays a non-nil Env over the executor's environment (as a
	// nil Env gets it) instead of replacing it.
	InheritEnv bool
	Tty        bool

	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer

	// Process is set by Start.
	Process *Process
	// ExitCode is set by Wait.
	ExitCode int

	ctx      context.Context
	copyDone chan error
	waited   bool
}

// ExitError reports a non-zero exit.
type ExitError struct {
	Code   int
	Stderr []byte // set by Output
}

func (e *ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Command returns a Cmd that runs name with args on executor.
func Command(executor Environment, name string, args ...string) *Cmd {
	return CommandContext(context.Background(), executor, name, args...)
}

// CommandContext is Command with a context: when ctx is done the process
// is terminated.
func CommandContext(ctx context.Context, executor Environment, name string, args ...string) *Cmd {
	return &Cmd{Executor: executor, Path: name, Args: append([]string{name}, args...), ctx: ctx}
}

// Start starts the command. A refusal by the executor is a *SpawnError:
// errors.Is(err, exec.ErrNotFound) when the program was not found, as
// with os/exec; a failed connection is a *TransportError.
func (c *Cmd) Start() error {
	if c.Process != nil {
		return errors.New("outpost: already started")
	}
	if c.Executor == nil {
		return errors.New("outpost: Cmd.Executor is nil")
	}
	if c.ctx == nil {
		c.ctx = context.Background()
	}
	params := protocol.ExecParams{Argv: append([]string{c.Path}, c.Args[min(1, len(c.Args)):]...), Cwd: c.Dir, Tty: c.Tty, PipeStdin: c.Stdin != nil}
	if len(c.Args) > 0 && c.Args[0] != c.Path {
		arg0 := c.Args[0]
		params.Arg0 = &arg0
	}
	params.Env = map[string]string{}
	for _, kv := range c.Env {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			// execve would pass it on, but the wire carries a map.
			return fmt.Errorf("outpost: Env entry %q is not KEY=VALUE", kv)
		}
		params.Env[k] = v
	}
	if c.Env == nil || c.InheritEnv {
		// What outpost exec sends: the executor lays Env over its own
		// core variables.
		params.EnvPolicy = &protocol.EnvPolicy{Inherit: protocol.InheritCore}
	}
	p, err := c.Executor.Start(c.ctx, params)
	if err != nil {
		return classifyStartError(err)
	}
	c.Process = p
	if c.Stdin != nil {
		c.copyDone = make(chan error, 1)
		go c.feedStdin()
	}
	if c.ctx.Done() != nil {
		go func() {
			select {
			case <-c.ctx.Done():
				p.Terminate(context.Background())
			case <-p.Done():
			}
		}()
	}
	return nil
}

// feedStdin copies Stdin to the process, waiting whenever the command
// reads slower than Stdin delivers (Process.Write's backpressure), and
// closes the process's stdin after the last byte so the command sees EOF.
// It reports once on copyDone. A failed copy still closes stdin (as
// os/exec closes the pipe), after its error is reported to Wait, so a
// command never waits for input that will not come.
func (c *Cmd) feedStdin() {
	err := c.copyStdin()
	switch {
	case err == errStdinDone:
		c.copyDone <- nil
	case err != nil:
		c.copyDone <- err
		if c.ctx.Err() == nil {
			c.Process.CloseStdin(c.ctx)
		}
	default:
		c.copyDone <- c.Process.CloseStdin(c.ctx)
	}
}

// errStdinDone: the child closed its stdin (or exited); the rest of Stdin
// is not wanted, as with os/exec when the child stops reading.
var errStdinDone = errors.New("stdin closed by the command")

// copyStdin writes Stdin to the process until EOF (nil), the command
// closes its stdin (errStdinDone), or a read or write fails.
func (c *Cmd) copyStdin() error {
	buf := make([]byte, stdinChunk)
	for {
		n, err := c.Stdin.Read(buf)
		if n > 0 {
			st, werr := c.Process.Write(c.ctx, append([]byte(nil), buf[:n]...))
			if werr != nil {
				return werr
			}
			if st == protocol.WriteStdinClosed || st == protocol.WriteUnknownProcess {
				return errStdinDone
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// stdinChunk is the most stdin bytes sent in one process/write.
const stdinChunk = 64 << 10

// Wait copies the output to Stdout and Stderr until the process closes.
// A non-zero exit is an *ExitError.
func (c *Cmd) Wait() error {
	if c.Process == nil {
		return errors.New("outpost: not started")
	}
	if c.waited {
		return errors.New("outpost: Wait was already called")
	}
	c.waited = true
	var werr error
	for ev := range c.Process.Events() {
		switch ev.Kind {
		case EventOutput:
			w := c.Stdout
			if ev.Stream == protocol.StreamStderr {
				w = c.Stderr
			}
			if w != nil && werr == nil {
				if _, err := w.Write(ev.Data); err != nil {
					werr = err
				}
			}
		case EventFailed:
			return ev.Err
		}
	}
	if err := c.Process.Err(); err != nil {
		return err
	}
	c.ExitCode = int(c.Process.exitCode.Load())
	if c.copyDone != nil {
		select {
		case err := <-c.copyDone:
			if err != nil && werr == nil {
				werr = fmt.Errorf("copying stdin: %w", err)
			}
		default: // the process is done; a stdin still being read is abandoned
		}
	}
	if c.ExitCode != 0 {
		return &ExitError{Code: c.ExitCode}
	}
	return werr
}

// Run starts the command and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs the command and returns its stdout; an *ExitError carries
// the stderr.
func (c *Cmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("outpost: Stdout already set")
	}
	var out, errb bytes.Buffer
	c.Stdout = &out
	if c.Stderr == nil {
		c.Stderr = &errb
	}
	err := c.Run()
	var ee *ExitError
	if errors.As(err, &ee) {
		ee.Stderr = errb.Bytes()
	}
	return out.Bytes(), err
}

// CombinedOutput runs the command and returns stdout and stderr together,
// in arrival order.
func (c *Cmd) CombinedOutput() ([]byte, error) {
	if c.Stdout != nil || c.Stderr != nil {
		return nil, errors.New("outpost: Stdout or Stderr already set")
	}
	var b bytes.Buffer
	c.Stdout, c.Stderr = &b, &b
	err := c.Run()
	return b.Bytes(), err
}
