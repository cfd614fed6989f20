// Package errkind decides the protocol.Kind of an error from the system,
// package pathmap or package sandbox, by what it wraps (errors.Is), never
// by its text. Package executor (process starts, stdin, signals) and
// package remotefs (fs/* calls) share it; errors of their own they classify
// first.
package errkind

import (
	"errors"
	"io/fs"
	"syscall"

	"github.com/outpost-exec/outpost/pathmap"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// Of is err's kind; fallback when nothing it wraps says more.
func Of(err error, fallback protocol.Kind) protocol.Kind {
	switch {
	case errors.Is(err, sandbox.ErrCannotEnforce):
		return protocol.KindUnsupported
	case errors.Is(err, sandbox.ErrTooManyToProtect), errors.Is(err, sandbox.ErrGlobTooBroad), errors.Is(err, syscall.EFBIG):
		return protocol.KindTooLarge
	case errors.Is(err, sandbox.ErrSymlinkedWorkspace), errors.Is(err, sandbox.ErrNotAbsolute), errors.Is(err, sandbox.ErrRootSandboxUser),
		errors.Is(err, pathmap.ErrForeignPath), errors.Is(err, pathmap.ErrEscape):
		return protocol.KindInvalid
	case errors.Is(err, syscall.EAGAIN), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT),
		errors.Is(err, syscall.EMFILE), errors.Is(err, syscall.ENFILE), errors.Is(err, syscall.ENOMEM):
		return protocol.KindExhausted
	case errors.Is(err, fs.ErrNotExist):
		return protocol.KindNotFound
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		return protocol.KindPermission
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTDIR),
		errors.Is(err, syscall.ENOTEMPTY), errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.ENAMETOOLONG):
		return protocol.KindInvalid
	}
	return fallback
}
