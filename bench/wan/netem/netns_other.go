//go:build !linux

package netem

import (
	"fmt"
	"os/exec"
	"runtime"
)

// The links need network namespaces and TUN devices, which only Linux
// has here. Elsewhere these stand-ins keep the harness building: Available
// says why nothing can run, and every constructor fails the same way, so
// no row is measured on a link that is not the emulated one.

var errUnsupported = fmt.Errorf("netem: network namespaces and TUN devices are Linux's; this is %s", runtime.GOOS)

// NS is a named network namespace (Linux only).
type NS struct {
	Name string
}

// Available says why namespaces cannot be built here: always.
func Available() error { return errUnsupported }

// CreateNS fails: no namespaces here.
func CreateNS(name string) (*NS, error) { return nil, errUnsupported }

// RemoveStale has nothing to remove: no namespaces here.
func RemoveStale(prefix string) ([]string, error) { return nil, nil }

// IP fails: no namespaces here.
func (n *NS) IP(args ...string) error { return errUnsupported }

// Do fails without running f.
func (n *NS) Do(f func() error) error { return errUnsupported }

// Start fails without starting cmd.
func (n *NS) Start(cmd *exec.Cmd) error { return errUnsupported }

// Pids is empty.
func (n *NS) Pids() []int { return nil }

// Delete has nothing to delete.
func (n *NS) Delete() error { return nil }

// Side is one end of a link (Linux only).
type Side struct {
	NS   *NS
	Dev  string
	Addr string
}

// Link is a point-to-point link between two namespaces (Linux only).
type Link struct {
	Name   string
	A, B   Side
	AB, BA *Pipe
}

// NewLink fails: no TUN devices here.
func NewLink(name string, a, b Side, mtu int, gso bool, cfg Config, seed uint64) (*Link, error) {
	return nil, errUnsupported
}

// Set fails.
func (l *Link) Set(cfg Config, seed uint64) error { return errUnsupported }

// SetGSO fails.
func (l *Link) SetGSO(on bool) error { return errUnsupported }

// GSO is off.
func (l *Link) GSO() bool { return false }

// Close has nothing to close.
func (l *Link) Close() {}
