//go:build linux || darwin || freebsd

package executor

// platformSupported: the executor runs here (Linux fully; macOS and
// FreeBSD without the sandbox, which a start asking for it is refused).
func platformSupported() error { return nil }
