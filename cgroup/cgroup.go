package cgroup

import (
	"errors"
	"time"
)

// Config says what the executor asks of per-command cgroups. A limit the
// machine cannot enforce is dropped, and Status says so and why: callers
// that must have it check Status after Open.
type Config struct {
	// MemoryMax is each command's memory.max in bytes (0: no limit).
	MemoryMax int64
	// PidsMax is each command's pids.max (0: no limit).
	PidsMax int64
	// MaxLingering bounds the cgroups kept for finished commands whose
	// background processes still run (default 1024); past it the oldest
	// is killed.
	MaxLingering int
	// SweepEvery is how often lingering cgroups are checked and removed
	// once empty (default 1 s; one goroutine per Manager).
	SweepEvery time.Duration
}

// DefaultConfig limits each command to 4,096 processes where the pids
// controller is available, and sets no memory limit.
func DefaultConfig() Config {
	return Config{PidsMax: 4096, MaxLingering: 1024, SweepEvery: time.Second}
}

func (c Config) validate() error {
	switch {
	case c.MemoryMax < 0:
		return errors.New("cgroup: MemoryMax must not be negative")
	case c.PidsMax < 0:
		return errors.New("cgroup: PidsMax must not be negative")
	case c.MaxLingering < 0:
		return errors.New("cgroup: MaxLingering must not be negative")
	case c.SweepEvery < 0:
		return errors.New("cgroup: SweepEvery must not be negative")
	}
	return nil
}

// Status describes the cgroups a Manager makes, for logs and doctor.
type Status struct {
	Dir         string   // the executor's cgroup for commands
	Controllers []string // enabled for commands ("memory", "pids")
	MemoryMax   int64    // in force (0: none)
	PidsMax     int64    // in force (0: none)
	KillFile    bool     // cgroup.kill is available (else members are killed one by one)
	Moved       bool     // the executor moved itself to outpost-<pid>-self
	Swept       int      // stale cgroups of dead executors removed by Open
	// NoLimits says why a configured limit is not enforced ("" if every
	// configured limit is).
	NoLimits string
}

// ErrUnavailable prefixes every reason per-command cgroups cannot be used.
var ErrUnavailable = errors.New("per-command cgroups are not available")

// Probe is what Open would find on this machine, learnt without changing
// anything (for outpost executor doctor).
type Probe struct {
	Base string // the executor's own cgroup directory
	// Unavailable says why commands cannot get cgroups here (nil if they
	// can).
	Unavailable error
	Controllers []string // of memory and pids, those Base may delegate
	KillFile    bool     // cgroup.kill (Linux 5.14); else members are killed one by one
}

// Lines describes the probe for people.
func (p Probe) Lines() []string {
	if p.Unavailable != nil {
		return []string{
			"cgroup: " + p.Unavailable.Error(),
			"not enforced: a cgroup per command (terminate reaches the process group only; a descendant that calls setsid escapes it)",
			"not enforced: per-command memory and pids limits (--memory-max, --pids-max)",
		}
	}
	kill := "cgroup.kill"
	if !p.KillFile {
		kill = "killing members one by one (no cgroup.kill before Linux 5.14)"
	}
	lines := []string{
		"cgroup: v2 at " + p.Base,
		"enforced: a cgroup per command; terminate kills every process it started, setsid or not (" + kill + ")",
	}
	for _, c := range []struct{ name, flag string }{{"memory", "--memory-max"}, {"pids", "--pids-max"}} {
		has := false
		for _, a := range p.Controllers {
			has = has || a == c.name
		}
		if has {
			lines = append(lines, "enforceable: per-command "+c.name+" limit ("+c.flag+"), if the executor has this cgroup to itself")
		} else {
			lines = append(lines, "not enforced: per-command "+c.name+" limit ("+c.flag+"): the "+c.name+" controller is not available to "+p.Base+" (bound to cgroup v1, or not delegated)")
		}
	}
	return lines
}
