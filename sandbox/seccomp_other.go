//go:build !linux || !(amd64 || arm64)

package sandbox

import (
	"errors"
	"runtime"
)

// SeccompOptions selects the rules of the seccomp filter installed by
// InstallSeccomp.
type SeccompOptions struct {
	// DenyNetwork: socket() and socketpair() only for AF_UNIX (any other
	// domain → EPERM); so no TCP/UDP/raw/netlink/packet socket can be created.
	DenyNetwork    bool
	ThisThreadOnly bool
}

// errSeccompUnsupported is returned by InstallSeccomp on platforms without a
// seccomp implementation (anything but linux/amd64 and linux/arm64).
var errSeccompUnsupported = errors.New("sandbox: seccomp is not supported on " + runtime.GOOS + "/" + runtime.GOARCH)

// InstallSeccomp is not supported on this platform and always returns
// errSeccompUnsupported.
func InstallSeccomp(opts SeccompOptions) error {
	return errSeccompUnsupported
}

// SeccompSupported reports false on this platform.
func SeccompSupported() bool { return false }
