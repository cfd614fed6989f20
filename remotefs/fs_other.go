//go:build !(linux || darwin || freebsd)

package remotefs

import (
	"runtime"

	"github.com/outpost-exec/outpost/protocol"
)

// The fs/* methods resolve every path by descriptors (fsroot.go), which
// needs openat and friends: Linux, macOS and FreeBSD. Elsewhere (Windows)
// the package compiles so that its users do, and every call is refused as
// unsupported, naming the platform — the executor does not run there.

// Session is one executor session's file system; here it refuses.
type Session struct {
	cfg Config
	id  string
}

// NewSession returns a file system that refuses every call.
func NewSession(cfg Config, sessionID string) *Session {
	return &Session{cfg: cfg, id: sessionID}
}

func (s *Session) refuse(method string) (any, error) {
	return nil, protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
		"%s: the executor's file system runs on Linux, macOS and FreeBSD; this is %s", method, runtime.GOOS)
}

func (s *Session) ReadFile(protocol.FsReadFileParams) (any, error) {
	return s.refuse(protocol.MethodFsReadFile)
}
func (s *Session) WriteFile(protocol.FsWriteFileParams) (any, error) {
	return s.refuse(protocol.MethodFsWriteFile)
}
func (s *Session) CreateDirectory(protocol.FsCreateDirectoryParams) (any, error) {
	return s.refuse(protocol.MethodFsCreateDirectory)
}
func (s *Session) GetMetadata(protocol.FsPathParams) (any, error) {
	return s.refuse(protocol.MethodFsGetMetadata)
}
func (s *Session) Canonicalize(protocol.FsPathParams) (any, error) {
	return s.refuse(protocol.MethodFsCanonicalize)
}
func (s *Session) ReadDirectory(protocol.FsPathParams) (any, error) {
	return s.refuse(protocol.MethodFsReadDirectory)
}
func (s *Session) Remove(protocol.FsRemoveParams) (any, error) {
	return s.refuse(protocol.MethodFsRemove)
}
func (s *Session) Copy(protocol.FsCopyParams) (any, error) { return s.refuse(protocol.MethodFsCopy) }
func (s *Session) CreateSymlink(protocol.FsCreateSymlinkParams) (any, error) {
	return s.refuse(protocol.MethodFsCreateSymlink)
}
func (s *Session) Hash(protocol.FsHashParams) (any, error) { return s.refuse(protocol.MethodFsHash) }
func (s *Session) Open(protocol.FsOpenParams) (any, error) { return s.refuse(protocol.MethodFsOpen) }
func (s *Session) Create(protocol.FsCreateParams) (any, error) {
	return s.refuse(protocol.MethodFsCreate)
}
func (s *Session) ReadBlock(protocol.FsReadBlockParams) (any, error) {
	return s.refuse(protocol.MethodFsReadBlock)
}
func (s *Session) WriteBlock(protocol.FsWriteBlockParams) (any, error) {
	return s.refuse(protocol.MethodFsWriteBlock)
}
func (s *Session) Close(protocol.FsCloseParams) (any, error) {
	return s.refuse(protocol.MethodFsClose)
}
func (s *Session) Walk(protocol.FsWalkParams) (any, error) { return s.refuse(protocol.MethodFsWalk) }

// ReleaseBlock: no block was ever read here.
func ReleaseBlock(any) {}

// End: nothing is open.
func (s *Session) End() {}
