//go:build linux

package netem

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// vnetHdrLen is the virtio_net_hdr that precedes each packet with
// IFF_VNET_HDR (the kernel's default size).
const vnetHdrLen = 10

// tsoFlags are the offloads a GSO link asks for: the kernel hands over
// TCP segments of up to 64 KiB unsplit (with their checksum left partial),
// and the peer TUN takes them back the same way, so one read and one write
// move up to ~44 MTU-sized segments.
const tsoFlags = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6

// openTUN creates TUN device name in ns (IFF_TUN | IFF_NO_PI: one read or
// write is one IP packet; with vnet, behind a virtio_net_hdr) and returns
// it non-blocking, so reads go through Go's poller and Close interrupts
// them. The device lives as long as the file is open.
func openTUN(ns *NS, name string, vnet bool) (*os.File, error) {
	if len(name) == 0 || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("netem: bad interface name %q", name)
	}
	fd := -1
	err := ns.Do(func() error {
		var err error
		// The device joins the namespace of the thread that opens the
		// file; hence inside Do.
		if fd, err = unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0); err != nil {
			return fmt.Errorf("open /dev/net/tun: %w", err)
		}
		ifr, err := unix.NewIfreq(name)
		if err != nil {
			return err
		}
		flags := uint16(unix.IFF_TUN | unix.IFF_NO_PI)
		if vnet {
			flags |= unix.IFF_VNET_HDR
		}
		ifr.SetUint16(flags)
		if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			return fmt.Errorf("TUNSETIFF %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return nil, err
	}
	return os.NewFile(uintptr(fd), name), nil
}

// setOffload turns TSO on or off on a vnet TUN.
func setOffload(f *os.File, on bool) error {
	flags := 0
	if on {
		flags = tsoFlags
	}
	raw, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var ierr error
	if err := raw.Control(func(fd uintptr) { ierr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, flags) }); err != nil {
		return err
	}
	if ierr != nil {
		return fmt.Errorf("TUNSETOFFLOAD %s: %w", f.Name(), ierr)
	}
	return nil
}

// filePort reads and writes whole packets on a TUN file.
type filePort struct{ f *os.File }

func (p filePort) ReadPacket(b []byte) (int, error) { return p.f.Read(b) }
func (p filePort) WritePacket(b []byte) error {
	_, err := p.f.Write(b)
	return err
}

// RealClock is CLOCK_MONOTONIC with clock_nanosleep on an absolute
// deadline: tens of microseconds late at most, where Go's timers can be a
// millisecond late.
type RealClock struct{}

func (RealClock) Now() int64 {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

func (RealClock) SleepUntil(t int64) {
	ts := unix.NsecToTimespec(t)
	for unix.ClockNanosleep(unix.CLOCK_MONOTONIC, unix.TIMER_ABSTIME, &ts, nil) == unix.EINTR {
	}
}
