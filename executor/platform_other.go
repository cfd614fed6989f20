//go:build !(linux || darwin || freebsd)

package executor

import (
	"net"
	"runtime"

	"github.com/outpost-exec/outpost/protocol"
)

// The executor needs POSIX processes (process groups, PTYs, signals) and
// descriptor-relative file access (remotefs), so on Windows it does not
// start: NewServer refuses with an error of kind unsupported naming the
// platform. The rest of this file only lets the package compile there.

func platformSupported() error {
	return protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
		"the executor runs on Linux and macOS; this is %s", runtime.GOOS)
}

// peerUID: no peer credentials here.
func peerUID(*net.UnixConn) (int, bool) { return 0, false }
