//go:build darwin || freebsd

package engine

import (
	"errors"
	"runtime"
	"sync"

	"github.com/outpost-exec/outpost/cgroup"
	"github.com/outpost-exec/outpost/sandbox"
)

// There is no sandbox pool off Linux: there is no sandbox. The backend's
// pool hooks find none (newHelperPool refuses), so nothing is pooled.

type helperPool struct{ mu sync.Mutex }

func newHelperPool(int, *sandbox.User, *cgroup.Manager) (*helperPool, error) {
	return nil, errors.New("engine: no sandbox pool on " + runtime.GOOS)
}

func (p *helperPool) fits(*sandbox.User) bool                          { return false }
func (p *helperPool) refillLocked()                                    {}
func (p *helperPool) stats() SandboxPoolStats                          { return SandboxPoolStats{} }
func (p *helperPool) close()                                           {}
func (b *LocalBackend) startPooled(*localProcess, sandbox.Launch) bool { return false }
