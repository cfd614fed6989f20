package engine

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/sandbox"
)

// The sandbox pool: helpers started ahead of the commands they will run
// (sandbox.PooledHelper), so that a sandboxed start skips the clone into
// new namespaces and the helper's runtime start. Each pooled helper is
// already in its own user, mount and PID namespace, its own session and
// its own cgroup (with the command limits), and serves exactly one
// command. An empty pool never makes a start wait: it starts its helper
// the usual way, and the pool refills in the background.

// Time limits of pooled helpers: to start and report ready (off any
// command's path), and to take a command's descriptors (on it; a helper
// that misses it is killed and the command starts the usual way).
const (
	poolReadyTimeout = 10 * time.Second
	poolHandTimeout  = 2 * time.Second
)

// helperPool holds up to size ready helpers of one shape (the host user
// sandboxed commands run as). Bounds: size idle helpers, one refill
// goroutine that starts one helper at a time and only while the pool is
// short; none at rest.
type helperPool struct {
	size    int
	user    *sandbox.User
	cgroups *cgroup.Manager // nil: helpers without cgroups

	mu      sync.Mutex
	idle    []*pooledHelper
	filling bool
	closed  bool
	lastErr error // the last refill's failure, nil once one succeeds
	refills sync.WaitGroup
	// taken counts starts that found a ready helper (and the helper took
	// the command); missed, those that started the usual way.
	taken, missed uint64

	// A pooled helper's mount namespace is a copy of the executor's made
	// when the helper started: a file system mounted on the host since is
	// missing from it, and one unmounted since is still there (and pinned
	// by it). mounts tells when the executor's mount table changed; gen
	// counts the changes seen, so a helper started before one is never
	// used. watching ends the watcher.
	mounts   *mountWatch
	gen      uint64
	watching sync.WaitGroup
}

// mountsSettle is how long the watcher lets a run of mount changes settle
// before it refills the pool.
const mountsSettle = 100 * time.Millisecond

// mountWatch reports changes to the executor's mount table:
// /proc/self/mountinfo signals POLLPRI after every mount or unmount in the
// namespace, once per open file and change, so the starts and the watcher
// each read their own. They are raw descriptors, never the runtime's
// netpoller's: its epoll would take the events first.
type mountWatch struct {
	atTake, watcher int
	stop, stopped   int // a pipe: closing stop wakes the watcher
}

func openMountWatch() (*mountWatch, error) {
	const flags = unix.O_RDONLY | unix.O_CLOEXEC
	atTake, err := unix.Open("/proc/self/mountinfo", flags, 0)
	if err != nil {
		return nil, err
	}
	watcher, err := unix.Open("/proc/self/mountinfo", flags, 0)
	if err != nil {
		unix.Close(atTake)
		return nil, err
	}
	var pipe [2]int
	if err := unix.Pipe2(pipe[:], unix.O_CLOEXEC); err != nil {
		unix.Close(atTake)
		unix.Close(watcher)
		return nil, err
	}
	return &mountWatch{atTake: atTake, watcher: watcher, stopped: pipe[0], stop: pipe[1]}, nil
}

// changed reports, without waiting, whether the mount table changed since
// the last call for fd.
func changed(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLPRI}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue // a signal (the runtime's preemption among them)
		}
		// An error cannot tell: count it as a change, which costs only
		// the ready helpers.
		return err != nil || n > 0 && fds[0].Revents&(unix.POLLPRI|unix.POLLERR) != 0
	}
}

func (m *mountWatch) close() { unix.Close(m.stop) }

// closeFiles closes the rest once the watcher has returned.
func (m *mountWatch) closeFiles() {
	unix.Close(m.atTake)
	unix.Close(m.watcher)
	unix.Close(m.stopped)
}

// pooledHelper is a ready helper and the cgroup it was born in.
type pooledHelper struct {
	h  *sandbox.PooledHelper
	cg *cgroup.Cgroup
}

// newHelperPool makes a pool; without a way to see the mount table change
// there is none (its helpers could run commands in a stale view).
func newHelperPool(size int, user *sandbox.User, cgroups *cgroup.Manager) (*helperPool, error) {
	mounts, err := openMountWatch()
	if err != nil {
		return nil, fmt.Errorf("engine: sandbox pool: watching the mount table: %w", err)
	}
	var shape *sandbox.User
	if user != nil {
		u := *user // the caller's later changes do not reach it
		shape = &u
	}
	p := &helperPool{size: min(size, MaxSandboxPool), user: shape, cgroups: cgroups, mounts: mounts}
	p.watching.Add(1)
	go p.watchMounts()
	return p, nil
}

// watchMounts discards the ready helpers when the mount table changes, so
// none holds on to a file system the host has let go of, and refills the
// pool once the changes have settled.
func (p *helperPool) watchMounts() {
	defer p.watching.Done()
	fds := []unix.PollFd{{Fd: int32(p.mounts.watcher), Events: unix.POLLPRI}, {Fd: int32(p.mounts.stopped), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil && err != unix.EINTR {
			return
		}
		if fds[1].Revents != 0 {
			return // closed
		}
		if fds[0].Revents&(unix.POLLPRI|unix.POLLERR) == 0 {
			continue
		}
		// Retire the ready helpers at each change, until a run of
		// changes has settled; then refill.
		for settled := false; !settled; {
			p.mountsChanged()
			settle := []unix.PollFd{{Fd: int32(p.mounts.stopped), Events: unix.POLLIN}}
			if n, _ := unix.Poll(settle, int(mountsSettle/time.Millisecond)); n > 0 {
				return // closed
			}
			settled = !changed(p.mounts.watcher)
		}
		p.mu.Lock()
		p.refillLocked()
		p.mu.Unlock()
	}
}

// mountsChanged retires every ready helper: they were started before the
// change.
func (p *helperPool) mountsChanged() {
	p.mu.Lock()
	p.gen++
	stale := p.idle
	p.idle = nil
	if len(stale) > 0 {
		p.refills.Add(1)
	}
	p.mu.Unlock()
	if len(stale) > 0 {
		// Off the caller's path (a start falls back meanwhile).
		go func() {
			defer p.refills.Done()
			for _, h := range stale {
				h.discard()
			}
		}()
	}
}

// fits reports whether this pool's helpers run commands as user.
func (p *helperPool) fits(user *sandbox.User) bool { return sandbox.SameUser(p.user, user) }

// refillDelay is how long a start that took a helper lets the pool stay
// short unless its command exits first: starting a helper costs a few
// milliseconds of CPU, which on a small machine would otherwise compete
// with the very command whose helper it replaces.
const refillDelay = 50 * time.Millisecond

// take returns a ready helper, or nil when none is. An empty pool refills
// at once; otherwise call refillSoon.
func (p *helperPool) take() *pooledHelper {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if changed(p.mounts.atTake) {
		p.mu.Unlock()
		p.mountsChanged()
		p.mu.Lock()
	}
	if len(p.idle) == 0 {
		p.refillLocked()
		return nil
	}
	h := p.idle[0]
	p.idle[0] = nil
	p.idle = p.idle[1:]
	return h
}

// refillSoon refills the pool once done is closed (the command a taken
// helper runs has exited) or after refillDelay, whichever comes first.
func (p *helperPool) refillSoon(done <-chan struct{}) {
	go func() {
		t := time.NewTimer(refillDelay)
		defer t.Stop()
		select {
		case <-done:
		case <-t.C:
		}
		p.mu.Lock()
		p.refillLocked()
		p.mu.Unlock()
	}()
}

// giveBack returns an unused helper to the pool (or discards it if the
// pool has closed or filled meanwhile).
func (p *helperPool) giveBack(h *pooledHelper) {
	p.mu.Lock()
	if p.closed || len(p.idle) >= p.size {
		p.mu.Unlock()
		h.discard()
		return
	}
	p.idle = append(p.idle, h)
	p.mu.Unlock()
}

// refillLocked starts the refill goroutine unless it runs or the pool is
// full.
func (p *helperPool) refillLocked() {
	if p.filling || p.closed || len(p.idle) >= p.size {
		return
	}
	p.filling = true
	p.refills.Add(1)
	go p.refill()
}

// refill starts helpers one at a time until the pool is full. A failure
// stops it until the next take (no retry loop against a machine that
// cannot start helpers).
func (p *helperPool) refill() {
	defer p.refills.Done()
	for {
		p.mu.Lock()
		if p.closed || len(p.idle) >= p.size {
			p.filling = false
			p.mu.Unlock()
			return
		}
		gen := p.gen
		p.mu.Unlock()
		h, err := p.spawn()
		p.mu.Lock()
		p.lastErr = err
		if err == nil && p.gen != gen {
			// Started before a change of the mount table: retired; the
			// watcher refills once the changes settle.
			p.filling = false
			p.mu.Unlock()
			h.discard()
			return
		}
		if err != nil || p.closed {
			p.filling = false
			p.mu.Unlock()
			if h != nil {
				h.discard()
			}
			return
		}
		p.idle = append(p.idle, h)
		p.mu.Unlock()
	}
}

// spawn starts one helper in a cgroup of its own and waits until it is
// ready.
func (p *helperPool) spawn() (*pooledHelper, error) {
	var cg *cgroup.Cgroup
	if p.cgroups != nil {
		var err error
		if cg, err = p.cgroups.New(); err != nil {
			return nil, fmt.Errorf("a cgroup for a pooled sandbox helper: %w", err)
		}
	}
	h, err := sandbox.StartPooledHelper(p.user, func(attr *syscall.SysProcAttr) {
		if cg != nil {
			attr.UseCgroupFD, attr.CgroupFD = true, cg.FD()
		}
	})
	if cg != nil {
		cg.Started()
	}
	if err != nil {
		if cg != nil {
			cg.Release()
		}
		return nil, err
	}
	ph := &pooledHelper{h: h, cg: cg}
	if err := h.AwaitReady(poolReadyTimeout); err != nil {
		ph.discard()
		return nil, err
	}
	return ph, nil
}

// discard kills and reaps a helper that will run no command and removes
// its cgroup.
func (h *pooledHelper) discard() {
	h.h.Discard()
	if h.cg != nil {
		h.cg.Kill() // nothing can be left in it; this makes sure
		h.cg.Release()
	}
}

func (p *helperPool) stats() SandboxPoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return SandboxPoolStats{Size: p.size, Ready: len(p.idle), Taken: p.taken, Missed: p.missed, LastError: p.lastErr}
}

// count records how a start went.
func (p *helperPool) count(taken bool) {
	p.mu.Lock()
	if taken {
		p.taken++
	} else {
		p.missed++
	}
	p.mu.Unlock()
}

// close kills the ready helpers and stops refilling; helpers already
// running commands are not the pool's any more.
func (p *helperPool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	p.mounts.close()
	p.watching.Wait()
	for _, h := range idle {
		h.discard()
	}
	p.refills.Wait()
	p.mounts.closeFiles()
}

// startPooled hands a sandboxed command to a pre-started helper; false:
// none was ready, or the one taken failed before the command started, and
// the command starts the usual way.
func (b *LocalBackend) startPooled(p *localProcess, l sandbox.Launch) bool {
	if !l.Poolable() {
		return false
	}
	pool := b.sandboxPool(l.User)
	if pool == nil {
		return false
	}
	h := pool.take()
	if h == nil {
		pool.count(false)
		return false
	}
	// miss starts the command the usual way; the helper serves the next
	// command (kept) or is killed and replaced.
	miss := func(kept bool) bool {
		pool.count(false)
		if kept {
			pool.giveBack(h)
		} else {
			h.discard()
			pool.refillSoon(p.exited)
		}
		return false
	}
	cmd := p.cmd
	stdin, _ := cmd.Stdin.(*os.File)
	if stdin == nil {
		f, err := os.Open(os.DevNull) // as os/exec gives a nil Stdin
		if err != nil {
			return miss(true)
		}
		defer f.Close()
		stdin = f
	}
	stdio := [3]*os.File{stdin, cmd.Stdout.(*os.File), cmd.Stderr.(*os.File)}
	if err := h.h.Hand(l, cmd.Args, cmd.Env, stdio, p.tty, poolHandTimeout); err != nil {
		// ErrPooledMismatch: nothing was sent.
		return miss(errors.Is(err, sandbox.ErrPooledMismatch))
	}
	// The placeholders are made while the helper takes its descriptors
	// and sets up what does not need them; a helper that does not take
	// its descriptors is replaced by a fresh one (which finds the
	// placeholders held).
	l.Hold()
	if err := h.h.Taken(poolHandTimeout); err != nil {
		return miss(false)
	}
	h.h.Proceed()
	pool.count(true)
	pool.refillSoon(p.exited)
	p.cmd = h.h.Cmd
	p.cg = h.cg
	p.exitReport = h.h.Exited
	return true
}
