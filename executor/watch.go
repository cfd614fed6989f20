package executor

import (
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/transport"
)

// fs/watchMissing's front end (remotefs/watch_linux.go does the watching).
//
// The watch belongs to the connection, as in codex 0.171's server: a
// session detached and resumed on another connection starts with no watch
// and a fresh watchId order, and what the old connection watched is gone
// with it (its fs/missingChanged could reach nobody). The handler runs on
// the read loop, so requests are judged in the order they arrive, as the
// watchId order means; it makes a few lstat and inotify calls, no
// reads.

// fsWatchMissing answers fs/watchMissing; the watch's goroutine starts
// once the reply is queued, so fs/missingChanged never overtakes it.
func (c *serverConn) fsWatchMissing(m *transport.Message) (any, error) {
	p, err := decodeWatchMissing(m)
	if err != nil {
		return nil, err
	}
	if c.missing == nil {
		w, err := c.session.files.NewMissingWatcher(func(id uint64) {
			c.notify(protocol.MethodFsMissingChanged, protocol.FsMissingChangedParams{WatchID: id})
		})
		if err != nil {
			return nil, err
		}
		c.missing = w
	}
	res, start, err := c.missing.WatchMissing(p)
	if err != nil {
		return nil, err
	}
	if start != nil {
		c.parkedMu.Lock()
		c.parked = append(c.parked, start)
		c.parkedMu.Unlock()
	}
	return res, nil
}

// closeMissingWatch drops the connection's watch, once its send queue has
// shut down (a notification being handed over then gives up).
func (c *serverConn) closeMissingWatch() {
	if c.missing != nil {
		c.missing.Close()
	}
}

// decodeWatchMissing decodes the params with codex's messages for what
// is absent; other malformed params get decode's (same code, -32602).
func decodeWatchMissing(m *transport.Message) (protocol.FsWatchMissingParams, error) {
	var p protocol.FsWatchMissingParams
	if m.Params == nil || m.Params.Absent() {
		return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "invalid type: null, expected struct FsWatchMissingParams")
	}
	var probe struct {
		WatchID any `json:"watchId" msgpack:"watchId"`
		Missing any `json:"missing" msgpack:"missing"`
	}
	if err := decode(m, &p, true); err != nil {
		return p, err
	}
	// A second pass only to tell an absent field from a zero one.
	if err := m.Params.Decode(&probe); err == nil {
		switch {
		case probe.WatchID == nil:
			return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "missing field `watchId`")
		case probe.Missing == nil:
			return p, protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams, "missing field `missing`")
		}
	}
	return p, nil
}
