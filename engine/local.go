//go:build linux || darwin || freebsd

package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// LocalBackend runs real child processes on this machine, each in its own
// process group (a session of its own on a PTY) with a parent-death signal,
// and, given Cgroups, in a cgroup of its own, so a terminate reaches its
// whole tree — even descendants that left the group with setsid — and none
// outlives the executor.
type LocalBackend struct {
	Retention Retention
	// TerminateGrace is the wait between TERM and KILL (default 2 s).
	TerminateGrace time.Duration
	// StdinQueue bounds the writes queued for one child's stdin (default
	// 128 writes and 16 MiB); a write beyond it is refused, not buffered.
	StdinQueueWrites int
	StdinQueueBytes  int64
	// Cgroups, when set, gives every command a cgroup (with its memory and
	// pids limits); nil runs commands in process groups only.
	Cgroups *cgroup.Manager
	// SandboxPool is how many sandbox helpers are kept started ahead of
	// sandboxed commands, each for one command (default
	// DefaultSandboxPool(), at most MaxSandboxPool; 0: none). The pool
	// fills at WarmSandbox or at the first sandboxed start; set Cgroups
	// before either. Close kills the helpers it holds.
	SandboxPool int

	poolMu     sync.Mutex
	pool       *helperPool
	poolClosed bool
}

// NewLocalBackend returns a LocalBackend with default settings.
func NewLocalBackend() *LocalBackend {
	return &LocalBackend{
		Retention:        DefaultRetention(),
		TerminateGrace:   2 * time.Second,
		StdinQueueWrites: 128,
		StdinQueueBytes:  16 << 20,
		SandboxPool:      DefaultSandboxPool(),
	}
}

// WarmSandbox fills the sandbox pool for commands that run as user (nil:
// the executor's own ids) in the background, so the first sandboxed start
// finds a helper ready. Without it the pool fills at the first sandboxed
// start. It does nothing once a pool exists, with SandboxPool 0, or after
// Close.
func (b *LocalBackend) WarmSandbox(user *sandbox.User) {
	if p := b.sandboxPool(user); p != nil {
		p.mu.Lock()
		p.refillLocked()
		p.mu.Unlock()
	}
}

// sandboxPool returns the pool for user's commands, made on first use;
// nil when there is none for them.
func (b *LocalBackend) sandboxPool(user *sandbox.User) *helperPool {
	b.poolMu.Lock()
	defer b.poolMu.Unlock()
	if b.poolClosed || b.SandboxPool <= 0 {
		return nil
	}
	if b.pool == nil {
		p, err := newHelperPool(b.SandboxPool, user, b.Cgroups)
		if err != nil {
			b.poolClosed = true // this machine cannot keep one safely
			return nil
		}
		b.pool = p
	}
	if !b.pool.fits(user) {
		return nil // one shape per executor; another user starts the usual way
	}
	return b.pool
}

// SandboxPoolStats reports on the sandbox pool; ok is false while there is
// none (SandboxPool 0, no sandboxed start yet, or closed).
func (b *LocalBackend) SandboxPoolStats() (st SandboxPoolStats, ok bool) {
	b.poolMu.Lock()
	p := b.pool
	b.poolMu.Unlock()
	if p == nil {
		return SandboxPoolStats{}, false
	}
	return p.stats(), true
}

// Close kills the sandbox pool's ready helpers; later sandboxed starts
// start their helpers the usual way. Running commands are not affected.
func (b *LocalBackend) Close() {
	b.poolMu.Lock()
	p := b.pool
	b.pool, b.poolClosed = nil, true
	b.poolMu.Unlock()
	if p != nil {
		p.close()
	}
}

// pipeBytes is the kernel buffer of each output pipe (Linux default:
// 64 KiB). Kernel memory per process is bounded by 2 × pipeBytes.
const pipeBytes = 256 << 10

// Default PTY size.
const (
	DefaultRows = 24
	DefaultCols = 80
)

// Start spawns spec's command.
func (b *LocalBackend) Start(ctx context.Context, spec Spec) (Process, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("argv must not be empty")
	}
	path := spec.Path
	if path == "" {
		var err error
		if path, err = LookPath(spec.Argv[0], spec.Env, spec.Dir); err != nil {
			return nil, err
		}
	}
	args := append([]string(nil), spec.Argv...)
	if spec.Arg0 != "" {
		args[0] = spec.Arg0
	}
	cmd := &exec.Cmd{Path: path, Args: args, Env: spec.Env, Dir: spec.Dir}
	p := &localProcess{
		classify:   spec.Classify,
		exitReport: noExitReport,
		cmd:        cmd,
		grace:      b.TerminateGrace,
		tty:        spec.Tty,
		exited:     make(chan struct{}),
	}
	if p.grace <= 0 {
		p.grace = 2 * time.Second
	}
	var outputs []*os.File // parent's read ends
	var childEnds []*os.File
	defer func() {
		for _, f := range childEnds {
			f.Close()
		}
	}()
	if spec.Tty {
		rows, cols := spec.Rows, spec.Cols
		if rows == 0 {
			rows = DefaultRows
		}
		if cols == 0 {
			cols = DefaultCols
		}
		ptmx, tty, err := openPTY(rows, cols)
		if err != nil {
			return nil, err
		}
		childEnds = append(childEnds, tty)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr = ttyProcAttr()
		p.ptmx = ptmx
		outputs = append(outputs, ptmx)
		p.stdin = newStdinQueue(ptmx, b.StdinQueueWrites, b.StdinQueueBytes, true)
	} else {
		cmd.SysProcAttr = groupProcAttr()
		for range 2 {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll(outputs)
				return nil, fmt.Errorf("failed to create pipe: %w", err)
			}
			// A deeper pipe lets a fast writer run ahead while the pump
			// is busy (fewer stalls and wake-ups); best effort.
			deepenPipe(r)
			outputs = append(outputs, r)
			childEnds = append(childEnds, w)
		}
		cmd.Stdout, cmd.Stderr = childEnds[0], childEnds[1]
		if spec.PipeStdin {
			r, w, err := os.Pipe()
			if err != nil {
				closeAll(outputs)
				return nil, fmt.Errorf("failed to create pipe: %w", err)
			}
			childEnds = append(childEnds, r)
			cmd.Stdin = r
			p.stdin = newStdinQueue(w, b.StdinQueueWrites, b.StdinQueueBytes, false)
		}
		// cmd.Stdin nil means /dev/null.
	}
	fail := func(err error) (Process, error) {
		if p.release != nil {
			p.release()
		}
		closeAll(outputs)
		if p.stdin != nil && !spec.Tty {
			p.stdin.f.Close()
		}
		if p.cg != nil {
			p.cg.Release()
		}
		return nil, err
	}
	var launch sandbox.Launch
	if spec.SandboxSetup != nil {
		if err := sandboxAvailable(); err != nil {
			return fail(err) // never run unsandboxed what asked for a sandbox
		}
		l, err := spec.SandboxSetup()
		if err == nil && spec.Tty && l.User != nil {
			// The command's own terminal, for programs that open /dev/tty.
			err = childEnds[0].Chown(l.User.UID, l.User.GID)
		}
		if err != nil {
			if l.Release != nil {
				l.Release()
			}
			closeAll(l.Files)
			return fail(err)
		}
		launch = l
		p.release = l.Release
		defer closeAll(l.Files)
		// Its own session, as a pooled helper has: no terminal of the
		// executor's reaches it.
		if !spec.Tty {
			cmd.SysProcAttr.Setpgid, cmd.SysProcAttr.Setsid = false, true
		}
	}
	if spec.SandboxSetup == nil || !b.startPooled(p, launch) {
		if b.Cgroups != nil {
			cg, err := b.Cgroups.New()
			if err != nil {
				return fail(fmt.Errorf("failed to create the command's cgroup: %w", err))
			}
			// Born inside (clone3 CLONE_INTO_CGROUP): nothing it forks can
			// run outside, not even for an instant.
			p.cg = cg
			if err := bornInCgroup(cmd.SysProcAttr, cg); err != nil {
				return fail(err)
			}
		}
		if spec.SandboxSetup != nil {
			launch.Hold()
			// The command's environment travels in the spec, applied at
			// its execve: the helper runs with nothing else, so a
			// dynamic-loader variable of the command's (LD_PRELOAD)
			// cannot act before the sandbox does.
			env, err := launch.EnvFor(cmd.Env)
			if err != nil {
				return fail(err)
			}
			cmd.Env = []string{env}
			cmd.ExtraFiles = launch.Files
			launch.Apply(cmd.SysProcAttr)
		}
		err := cmd.Start()
		if p.cg != nil {
			p.cg.Started()
		}
		if err != nil {
			return fail(fmt.Errorf("failed to spawn %q: %w", spec.Argv[0], unwrapExecError(err)))
		}
	}
	p.pgid = p.cmd.Process.Pid
	p.log = NewEventLog(b.Retention, len(outputs))
	if p.stdin != nil {
		go p.stdin.run()
	}
	labels := []protocol.Stream{protocol.StreamStdout, protocol.StreamStderr}
	if spec.Tty {
		labels = []protocol.Stream{protocol.StreamPty}
	}
	for i, f := range outputs {
		p.streams = append(p.streams, newOutStream(f, labels[i]))
	}
	for _, st := range p.streams {
		go p.pump(st)
	}
	go p.wait()
	return p, nil
}

// noExitReport is the exitReport of a process that is its own: its wait
// status is its exit.
func noExitReport() (int, bool) { return 0, false }

// openPTY opens a PTY pair of the given size. The master is made
// non-blocking and pollable, so its pump can be woken and its ioctls never
// pin a thread; its fd is only ever used through SyscallConn.
func openPTY(rows, cols uint16) (master, slave *os.File, err error) {
	ptmx, tty, err := pty.Open()
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open pty: %w", err)
	}
	if err := pty.Setsize(ptmx, &pty.Winsize{Rows: rows, Cols: cols}); err != nil {
		ptmx.Close()
		tty.Close()
		return nil, nil, fmt.Errorf("failed to size pty: %w", err)
	}
	// Close-on-exec atomically: a child forked between a dup and a
	// later fcntl would inherit another command's terminal.
	fd, err := unix.FcntlInt(ptmx.Fd(), unix.F_DUPFD_CLOEXEC, 0)
	ptmx.Close()
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		tty.Close()
		return nil, nil, fmt.Errorf("failed to prepare pty master: %w", err)
	}
	return os.NewFile(uintptr(fd), "/dev/ptmx"), tty, nil
}

// control runs f on the file's descriptor without switching it to
// blocking mode (as File.Fd would).
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ferr error
	if err := rc.Control(func(fd uintptr) { ferr = fn(int(fd)) }); err != nil {
		return err
	}
	return ferr
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		f.Close()
	}
}

func unwrapExecError(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return fmt.Errorf("%s: %w", pe.Path, pe.Err)
	}
	return err
}

// LookPath resolves name as Start does for a Spec without Path: against
// the child's PATH in env (not the executor's), relative to dir for names
// with a slash.
func LookPath(name string, env []string, dir string) (string, error) {
	if strings.Contains(name, "/") {
		p := name
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		if err := checkExecutable(p); err != nil {
			return "", fmt.Errorf("failed to spawn %q: %w", name, err)
		}
		return p, nil
	}
	pathEnv, hasPath := "", false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv, hasPath = v, v != ""
		}
	}
	if pathEnv == "" {
		pathEnv = "/usr/local/bin:/usr/bin:/bin"
	}
	for _, d := range filepath.SplitList(pathEnv) {
		if d == "" {
			d = "."
		}
		if !filepath.IsAbs(d) {
			d = filepath.Join(dir, d)
		}
		p := filepath.Join(d, name)
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	if !hasPath {
		// Name the directories searched, but not as the command's PATH:
		// it has none.
		return "", fmt.Errorf("%q: %w (the command has no PATH; searched %s)", name, exec.ErrNotFound, pathEnv)
	}
	return "", fmt.Errorf("%q: %w in the command's PATH %s", name, exec.ErrNotFound, pathEnv)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return errors.New("is a directory")
	}
	if fi.Mode()&0o111 == 0 {
		// EACCES, as execve says: the kind is then permission.
		return fmt.Errorf("%w (not executable)", syscall.EACCES)
	}
	return nil
}

type localProcess struct {
	release func() // the sandbox's, after exit; nil if none
	// exitReport, for a command run by a pooled sandbox helper, waits
	// for the command's exit status from the helper (ok false: none came;
	// the helper's own status is the command's).
	exitReport func() (code int, ok bool)
	classify   func(exitCode, signal int32, lines func(yield func(string) bool)) bool
	cmd        *exec.Cmd
	log        *EventLog
	pgid       int
	tty        bool
	ptmx       *os.File
	grace      time.Duration
	stdin      *stdinQueue
	ids        WriteIDs
	cg         *cgroup.Cgroup // nil without cgroups
	// What the cgroup's limits refused, read as the process exits.
	oomKills, pidsRefusals atomic.Int64

	streams []*outStream

	exited     chan struct{}
	terminated atomic.Bool
	ptyOnce    sync.Once
}

func (p *localProcess) Log() *EventLog { return p.log }

// LimitHits reports how many of the command's processes the OOM killer
// took and how many forks pids.max refused (both 0 without a cgroup).
func (p *localProcess) LimitHits() (oomKills, pidsRefusals int) {
	return int(p.oomKills.Load()), int(p.pidsRefusals.Load())
}

// Pid is the child's process id (and process group).
func (p *localProcess) Pid() int { return p.pgid }

// outStream is one of the child's output streams as the pump reads it.
// consumed counts bytes taken from the fd; the read syscall and the count
// happen under mu, so at exit the waiter can tell exactly how many bytes
// the child wrote before exiting (consumed + what is still in the pipe)
// and log the exit only after them: output, then exited, never the reverse.
type outStream struct {
	f        *os.File
	label    protocol.Stream
	mu       sync.Mutex
	consumed int64
	logged   atomic.Int64
	done     atomic.Bool   // EOF or error: nothing more will be logged
	progress chan struct{} // signalled after each append and at the end
}

func newOutStream(f *os.File, label protocol.Stream) *outStream {
	return &outStream{f: f, label: label, progress: make(chan struct{}, 1)}
}

func (s *outStream) signal() {
	select {
	case s.progress <- struct{}{}:
	default:
	}
}

// exitDrainTimeout bounds how long the exit event waits for output the
// child wrote before exiting (it waits longer only if a client's
// backpressure holds the pump).
const exitDrainTimeout = 250 * time.Millisecond

// pump copies one output stream into the log until EOF. A PTY reports EIO
// once every holder of the terminal has closed it; that is its EOF.
func (p *localProcess) pump(s *outStream) {
	defer p.log.StreamEOF()
	defer s.signal()
	defer s.done.Store(true)
	defer func() {
		if !p.tty {
			s.f.Close()
		}
	}()
	buf := make([]byte, MaxChunkBytes)
	rc, err := s.f.SyscallConn()
	if err != nil {
		return
	}
	for {
		var n int
		var rerr error
		err := rc.Read(func(fd uintptr) bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			for {
				n, rerr = syscall.Read(int(fd), buf)
				if rerr != syscall.EINTR {
					break
				}
			}
			if rerr == syscall.EAGAIN {
				return false // wait until readable
			}
			if n > 0 {
				s.consumed += int64(n)
			}
			return true
		})
		if n > 0 {
			// A large read keeps its buffer (no copy; at most 4x its size
			// in capacity); a small one is copied out so retention is
			// charged for what it holds.
			var data []byte
			if n >= MaxChunkBytes/4 {
				data = buf[:n:n]
				buf = make([]byte, MaxChunkBytes)
			} else {
				data = make([]byte, n)
				copy(data, buf[:n])
			}
			if _, aerr := p.log.Append(s.label, data); aerr != nil {
				// Aborted: keep draining so the child is not blocked.
				io.Copy(io.Discard, s.f)
				return
			}
			s.logged.Add(int64(n))
			s.signal()
			continue
		}
		if err != nil || rerr != nil || n == 0 {
			return
		}
	}
}

// awaitWrittenOutput waits until the output the child wrote before exiting
// is in the log.
func (p *localProcess) awaitWrittenOutput() {
	deadline := time.NewTimer(exitDrainTimeout)
	defer deadline.Stop()
	for _, s := range p.streams {
		s.mu.Lock()
		target := s.consumed
		if rc, err := s.f.SyscallConn(); err == nil {
			rc.Control(func(fd uintptr) {
				if avail, err := unix.IoctlGetInt(int(fd), ioctlPendingInput); err == nil && avail > 0 {
					target += int64(avail)
				}
			})
		}
		s.mu.Unlock()
		for s.logged.Load() < target && !s.done.Load() {
			select {
			case <-s.progress:
			case <-deadline.C:
				return
			}
		}
	}
}

func (p *localProcess) wait() {
	// reaped is closed once the process started (the helper, for a
	// sandboxed command) is reaped.
	reaped := make(chan struct{})
	code, sig := int32(-1), int32(0)
	if c, ok := p.exitReport(); ok {
		// The helper has reported, and nothing but the helper is left in
		// the command's namespace: the command is gone. The helper's exit
		// (its namespaces torn down) is reaped in the background, and
		// what the sandbox set up is undone after it: removing a
		// placeholder that is still a mount point in the helper's
		// namespace would wait for that mount to be detached (about a
		// millisecond here).
		code = int32(c)
		go func() {
			p.cmd.Wait()
			if p.release != nil {
				p.release()
			}
			close(reaped)
		}()
	} else {
		err := p.cmd.Wait()
		close(reaped)
		if p.release != nil {
			// The helper was its PID namespace's init: everything the
			// command started there is gone with it.
			p.release()
		}
		if st, ok := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ok {
			switch {
			case st.Exited():
				code = int32(st.ExitStatus())
			case st.Signaled():
				code, sig = 128+int32(st.Signal()), int32(st.Signal())
			}
		} else if err != nil {
			code = -1
		}
	}
	close(p.exited)
	if p.stdin != nil && !p.tty {
		p.stdin.closeNow()
	}
	p.awaitWrittenOutput()
	denied := p.classify != nil && p.classify(code, sig, p.log.RetainedLines)
	limit := ""
	if p.cg != nil {
		oom, refused := p.cg.OOMKills(), p.cg.PidsMaxHits()
		p.oomKills.Store(int64(oom))
		p.pidsRefusals.Store(int64(refused))
		switch {
		case oom > 0:
			limit = protocol.LimitMemory
		case refused > 0 && code != 0:
			limit = protocol.LimitPids
		}
	}
	p.log.ExitWithLimit(code, sig, denied, limit)
	if p.cg != nil {
		go func() {
			<-p.log.Closed()
			<-reaped
			// Background processes it left keep the cgroup (bounded);
			// a terminate or Kill has already reached them.
			p.cg.Release()
		}()
	}
	if p.tty {
		// The PTY master stays open until every stream holder is done;
		// close it once the log is closed so its fd is not leaked.
		go func() {
			<-p.log.Closed()
			p.closePTY()
		}()
	}
}

func (p *localProcess) closePTY() {
	p.ptyOnce.Do(func() {
		if p.stdin != nil {
			p.stdin.closeNow()
		}
		p.ptmx.Close()
	})
}

func (p *localProcess) hasExited() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

func (p *localProcess) Write(data []byte, writeID string, closeStdin bool) (protocol.WriteStatus, error) {
	if p.stdin == nil {
		return protocol.WriteStdinClosed, nil
	}
	return p.ids.Accept(writeID, func() (protocol.WriteStatus, error) {
		return p.stdin.enqueue(data, closeStdin)
	})
}

var signalNumbers = map[protocol.Signal]syscall.Signal{
	protocol.SignalInterrupt: syscall.SIGINT,
	protocol.SignalTerminate: syscall.SIGTERM,
	protocol.SignalHangup:    syscall.SIGHUP,
	protocol.SignalKill:      syscall.SIGKILL,
	protocol.SignalQuit:      syscall.SIGQUIT,
	protocol.SignalUser1:     syscall.SIGUSR1,
	protocol.SignalUser2:     syscall.SIGUSR2,
}

func (p *localProcess) Signal(sig protocol.Signal) error {
	num, ok := signalNumbers[sig]
	if !ok {
		return fmt.Errorf("unsupported signal %q", sig)
	}
	select {
	case <-p.log.Closed():
		return nil
	default:
	}
	target := p.pgid
	if p.tty && (num == syscall.SIGINT || num == syscall.SIGQUIT) {
		// Keyboard signals go to the terminal's foreground job, as the
		// terminal itself would send them.
		control(p.ptmx, func(fd int) error {
			if fg, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP); err == nil && fg > 0 {
				target = fg
			}
			return nil
		})
	}
	if err := syscall.Kill(-target, num); err != nil && !errors.Is(err, syscall.ESRCH) {
		return fmt.Errorf("failed to signal process: %w", err)
	}
	return nil
}

func (p *localProcess) Resize(rows, cols uint16) error {
	if !p.tty {
		return ErrNotTTY
	}
	if rows == 0 || cols == 0 {
		return errors.New("rows and cols must be positive")
	}
	select {
	case <-p.log.Closed():
		return nil
	default:
	}
	err := control(p.ptmx, func(fd int) error {
		return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: rows, Col: cols})
	})
	if err != nil {
		return fmt.Errorf("failed to resize pty: %w", err)
	}
	return nil
}

func (p *localProcess) Terminate() bool {
	running := !p.hasExited()
	if !running && (p.cg == nil || !p.cg.Populated()) {
		return false
	}
	if !p.terminated.CompareAndSwap(false, true) {
		return running
	}
	p.signalAll(syscall.SIGTERM)
	go func() {
		t := time.NewTimer(p.grace)
		defer t.Stop()
		select {
		case <-p.log.Closed():
		case <-t.C:
			// Whatever is left (the leader, or descendants that ignored
			// TERM and still hold the output pipes) is killed.
			p.killAll()
			return
		}
		if p.cg == nil {
			return
		}
		// The leader and its output are done; descendants that left the
		// group and closed their output get the rest of the grace.
		tick := time.NewTicker(terminatePoll)
		defer tick.Stop()
		for p.cg.Populated() {
			select {
			case <-tick.C:
			case <-t.C:
				p.cg.Kill()
				return
			}
		}
	}()
	return running
}

// terminatePoll is how often a terminate checks, during its grace period,
// whether descendants that outlived the leader have gone.
const terminatePoll = 20 * time.Millisecond

// signalAll sends sig to the process group and to every process in the
// command's cgroup.
func (p *localProcess) signalAll(sig syscall.Signal) {
	syscall.Kill(-p.pgid, sig)
	if p.cg != nil {
		p.cg.Signal(sig)
	}
}

// killAll kills the process group and the command's whole cgroup.
func (p *localProcess) killAll() {
	syscall.Kill(-p.pgid, syscall.SIGKILL)
	if p.cg != nil {
		p.cg.Kill()
	}
}

func (p *localProcess) Kill() {
	select {
	case <-p.log.Closed():
		if p.cg == nil || !p.cg.Populated() {
			return
		}
	default:
	}
	p.killAll()
}

// stdinQueue feeds a child's stdin from a bounded queue, so a child that
// does not read its stdin never blocks the connection that writes to it.
type stdinQueue struct {
	f        *os.File
	isPTY    bool
	maxItems int
	maxBytes int64

	mu      sync.Mutex
	items   []stdinItem
	bytes   int64
	closed  bool // no more writes accepted
	kick    chan struct{}
	stopped chan struct{}
	stop    sync.Once
}

type stdinItem struct {
	data  []byte
	close bool
}

func newStdinQueue(f *os.File, maxItems int, maxBytes int64, isPTY bool) *stdinQueue {
	if maxItems <= 0 {
		maxItems = 128
	}
	if maxBytes <= 0 {
		maxBytes = 16 << 20
	}
	return &stdinQueue{f: f, isPTY: isPTY, maxItems: maxItems, maxBytes: maxBytes,
		kick: make(chan struct{}, 1), stopped: make(chan struct{})}
}

// eotChar is what a terminal in canonical mode reads as end of file (^D).
const eotChar = 0x04

func (q *stdinQueue) enqueue(data []byte, closeAfter bool) (protocol.WriteStatus, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return protocol.WriteStdinClosed, nil
	}
	if len(q.items) >= q.maxItems || (len(q.items) > 0 && q.bytes+int64(len(data)) > q.maxBytes) {
		return "", ErrStdinQueueFull
	}
	q.items = append(q.items, stdinItem{data: data, close: closeAfter})
	q.bytes += int64(len(data))
	if closeAfter && !q.isPTY {
		q.closed = true
	}
	select {
	case q.kick <- struct{}{}:
	default:
	}
	return protocol.WriteAccepted, nil
}

func (q *stdinQueue) run() {
	defer func() {
		if !q.isPTY {
			q.f.Close()
		}
	}()
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.mu.Unlock()
			select {
			case <-q.kick:
				continue
			case <-q.stopped:
				return
			}
		}
		it := q.items[0]
		q.items[0] = stdinItem{}
		q.items = q.items[1:]
		q.bytes -= int64(len(it.data))
		q.mu.Unlock()
		if len(it.data) > 0 {
			if _, err := q.f.Write(it.data); err != nil {
				q.markClosed()
				return
			}
		}
		if it.close {
			if q.isPTY {
				if _, err := q.f.Write([]byte{eotChar}); err != nil {
					q.markClosed()
					return
				}
				continue
			}
			return
		}
	}
}

func (q *stdinQueue) markClosed() {
	q.mu.Lock()
	q.closed = true
	q.items = nil
	q.bytes = 0
	q.mu.Unlock()
}

// closeNow stops feeding stdin: pending writes are dropped (the child has
// exited, or the terminal is going away).
func (q *stdinQueue) closeNow() {
	q.markClosed()
	q.stop.Do(func() {
		close(q.stopped)
		if !q.isPTY {
			q.f.Close() // unblocks a write to a child that stopped reading
		}
	})
}
