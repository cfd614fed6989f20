//go:build !linux

package cgroup

import (
	"fmt"
	"runtime"
	"syscall"
)

// Manager is unavailable off Linux.
type Manager struct{}

// Open reports that cgroups need Linux.
func Open(cfg Config) (*Manager, error) {
	return nil, fmt.Errorf("%w: cgroups need Linux (this is %s)", ErrUnavailable, runtime.GOOS)
}

// ProbeMachine reports that cgroups need Linux.
func ProbeMachine() Probe {
	return Probe{Unavailable: fmt.Errorf("%w: cgroups need Linux (this is %s)", ErrUnavailable, runtime.GOOS)}
}

func (m *Manager) Status() Status        { return Status{} }
func (m *Manager) New() (*Cgroup, error) { return nil, ErrUnavailable }
func (m *Manager) Lingering() int        { return 0 }
func (m *Manager) Close()                {}

// Cgroup is unavailable off Linux.
type Cgroup struct{}

func (c *Cgroup) FD() int                   { return -1 }
func (c *Cgroup) Dir() string               { return "" }
func (c *Cgroup) Started()                  {}
func (c *Cgroup) Procs() []int              { return nil }
func (c *Cgroup) Populated() bool           { return false }
func (c *Cgroup) Signal(sig syscall.Signal) {}
func (c *Cgroup) Kill()                     {}
func (c *Cgroup) OOMKills() int             { return 0 }
func (c *Cgroup) PidsMaxHits() int          { return 0 }
func (c *Cgroup) Release()                  {}
