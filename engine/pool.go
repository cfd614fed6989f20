package engine

import (
	"fmt"
	"os"
	"runtime"
	"sync"
	"syscall"
	"time"

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

// DefaultSandboxPool is the pool size NewLocalBackend chooses: one helper
// per core, at least 2 and at most 4 (a burst beyond it starts the rest
// the usual way while the pool refills).
func DefaultSandboxPool() int { return min(max(runtime.NumCPU(), 2), 4) }

// MaxSandboxPool bounds LocalBackend.SandboxPool.
const MaxSandboxPool = 64

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
}

// pooledHelper is a ready helper and the cgroup it was born in.
type pooledHelper struct {
	h  *sandbox.PooledHelper
	cg *cgroup.Cgroup
}

func newHelperPool(size int, user *sandbox.User, cgroups *cgroup.Manager) *helperPool {
	var shape *sandbox.User
	if user != nil {
		u := *user
		shape = &u
	}
	return &helperPool{size: min(size, MaxSandboxPool), user: shape, cgroups: cgroups}
}

// fits reports whether this pool's helpers run commands as user.
func (p *helperPool) fits(user *sandbox.User) bool {
	if (p.user == nil) != (user == nil) {
		return false
	}
	return p.user == nil || *p.user == *user
}

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
		p.mu.Unlock()
		h, err := p.spawn()
		p.mu.Lock()
		p.lastErr = err
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

// SandboxPoolStats describes a backend's sandbox pool.
type SandboxPoolStats struct {
	Size  int // helpers it keeps ready
	Ready int // ready now
	// Taken counts sandboxed starts a ready helper ran; Missed, those
	// that started their helper the usual way (none ready, or the one
	// taken failed before the command started).
	Taken, Missed uint64
	// LastError is why the last attempt to start a helper failed (nil if
	// it did not).
	LastError error
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
	for _, h := range idle {
		h.discard()
	}
	p.refills.Wait()
}

// devNull opens /dev/null as a command's stdin, as os/exec does for a nil
// Stdin.
func devNull() (*os.File, error) { return os.Open(os.DevNull) }
