package executor

import (
	"context"

	"github.com/outpost-exec/outpost/protocol"
)

// NewSessionForTest opens a session without a connection, for benchmarks
// and tests of the process engine in other packages.
func NewSessionForTest(s *Server) (*Session, error) { return s.newSession() }

// StartProcess starts a process in the session and returns it.
func (s *Session) StartProcess(ctx context.Context, p protocol.ExecParams) (Process, error) {
	if _, err := s.Start(ctx, p); err != nil {
		return nil, err
	}
	return s.lookup(p.ProcessID).proc, nil
}
