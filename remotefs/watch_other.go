//go:build !linux

package remotefs

import (
	"runtime"

	"github.com/outpost-exec/outpost/protocol"
)

// fs/watchMissing needs inotify (watch_linux.go). Elsewhere a watcher can
// be made, so a connection's bookkeeping is the same, but every watch is
// refused as unsupported, naming the platform: a client then falls back
// to polling rather than waiting for an event that never comes.

// MissingWatcher is one connection's fs/watchMissing state; off Linux it
// makes no watches.
type MissingWatcher struct{ s *Session }

// NewMissingWatcher returns a watcher that refuses every watch.
func (s *Session) NewMissingWatcher(func(watchID uint64)) (*MissingWatcher, error) {
	return &MissingWatcher{s: s}, nil
}

// Close is a no-op: no watch was made.
func (w *MissingWatcher) Close() {}

// WatchMissing refuses: watching missing paths needs Linux's inotify.
func (w *MissingWatcher) WatchMissing(protocol.FsWatchMissingParams) (protocol.FsWatchMissingResult, func(), error) {
	return protocol.FsWatchMissingResult{}, nil, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
		"%s: watching missing paths needs Linux (inotify); this is %s", protocol.MethodFsWatchMissing, runtime.GOOS)
}
