//go:build linux

package netem

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// netnsDir is where `ip netns` keeps its named namespaces.
const netnsDir = "/var/run/netns"

// NS is a named network namespace, made with `ip netns add` so that `ip
// -n NAME` and `ip netns exec NAME` reach it too.
type NS struct {
	Name string
	f    *os.File
}

// Available says why namespaces cannot be built here, or nil: they need
// root, the ip command and /dev/net/tun.
func Available() error {
	if os.Geteuid() != 0 {
		return errors.New("needs root (network namespaces and TUN devices)")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("needs the ip command (iproute2)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return errors.New("needs /dev/net/tun")
	}
	return nil
}

// ip runs the ip command.
func ip(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// IP runs `ip -n NAME args…`.
func (n *NS) IP(args ...string) error { return ip(append([]string{"-n", n.Name}, args...)...) }

// CreateNS makes a namespace with its loopback up and IPv6 off (so that
// no router solicitations or DAD packets cross the emulated links).
func CreateNS(name string) (*NS, error) {
	if name == "" || strings.ContainsAny(name, "/ \x00") || len(name) > 64 {
		return nil, fmt.Errorf("netem: bad namespace name %q", name)
	}
	if err := ip("netns", "add", name); err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(netnsDir, name))
	if err != nil {
		ip("netns", "del", name)
		return nil, err
	}
	n := &NS{Name: name, f: f}
	if err := n.IP("link", "set", "lo", "up"); err != nil {
		n.Delete()
		return nil, err
	}
	n.Do(func() error {
		for _, k := range []string{"all", "default"} {
			os.WriteFile("/proc/sys/net/ipv6/conf/"+k+"/disable_ipv6", []byte("1"), 0) // best effort: a kernel without IPv6 has no such file
		}
		return nil
	})
	return n, nil
}

// Do runs f on an OS thread that is in the namespace: sockets f creates
// and processes it starts (they inherit the forking thread's namespace)
// live there; the goroutines f starts do not. If the thread cannot be
// put back in its own namespace, it stays locked and dies with the
// goroutine rather than serve others in the wrong namespace.
func (n *NS) Do(f func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", n.Name, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		return errors.Join(ferr, fmt.Errorf("setns back from %s: %w", n.Name, err)) // thread stays locked: see above
	}
	runtime.UnlockOSThread()
	return ferr
}

// Start starts cmd inside the namespace. Like `ip netns exec` but without
// its extra process and /sys remount, which would add to every timed
// start. Pdeathsig is tied to the forking thread; Do returns that thread
// to the pool alive, so a child with Pdeathsig lives as long as we do.
func (n *NS) Start(cmd *exec.Cmd) error { return n.Do(cmd.Start) }

// Pids lists the processes in the namespace.
func (n *NS) Pids() []int { return nsPids(n.Name) }

func nsPids(name string) []int {
	out, err := exec.Command("ip", "netns", "pids", name).Output()
	if err != nil {
		return nil
	}
	var pids []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 && pid != os.Getpid() {
			pids = append(pids, pid)
		}
	}
	return pids
}

// Delete kills whatever still runs in the namespace (only processes this
// harness started live there) and removes it.
func (n *NS) Delete() error {
	if n == nil {
		return nil
	}
	if n.f != nil {
		n.f.Close()
		n.f = nil
	}
	return deleteNS(n.Name)
}

func deleteNS(name string) error {
	for _, pid := range nsPids(name) {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	return ip("netns", "del", name)
}

// RemoveStale deletes namespaces named prefix+PID+"-"… whose PID (the
// harness that made them) is no longer running: what a killed run left.
// It returns the names it removed.
func RemoveStale(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	} else if err != nil {
		return nil, err
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		pidStr, _, _ := strings.Cut(rest, "-")
		if pid, err := strconv.Atoi(pidStr); err == nil && pid > 0 && pid != os.Getpid() {
			if syscall.Kill(pid, 0) == nil && processIsOurs(pid) {
				continue // that run is still going
			}
		}
		if err := deleteNS(e.Name()); err != nil {
			errs = append(errs, err)
			continue
		}
		removed = append(removed, e.Name())
	}
	return removed, errors.Join(errs...)
}

// processIsOurs tells a live harness (the same executable name as this
// one) from an unrelated process that reused its pid.
func processIsOurs(pid int) bool {
	self, err1 := os.Readlink("/proc/self/exe")
	other, err2 := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err1 == nil && err2 == nil && filepath.Base(self) == filepath.Base(other)
}
