package remotefs

import (
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// A symlink swapped in for the file between the judgement and the open
// can only make the open fail (it is opened O_NOFOLLOW relative to the
// judged directory): the file outside is never truncated.
func TestReplaceCannotBeRedirectedByASwappedSymlink(t *testing.T) {
	s := fsTestSession(t)
	base := fsPrivateDir(t)
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "out")
	os.MkdirAll(ws, 0o755)
	os.Mkdir(out, 0o755)
	victim := filepath.Join(out, "victim")
	fsMustWrite(t, victim, "precious")
	file, link := filepath.Join(ws, "file"), filepath.Join(ws, "link")
	fsMustWrite(t, file, "x")
	os.Symlink(victim, link)
	stop := make(chan struct{})
	var swaps atomic.Int64
	done := make(chan struct{})
	go func() { defer close(done); swapLoop(file, link, stop, &swaps) }()
	opened := 0
	for i := 0; i < 2000; i++ {
		if err := replaceOpen(s, "h", file, fsWorkspace(ws)); err == nil {
			opened++
			s.Close(protocol.FsCloseParams{HandleID: "h"})
		}
	}
	close(stop)
	<-done
	if got := mustRead(t, victim); got != "precious" {
		t.Fatalf("the file outside was truncated through a swapped link (%d swaps, %d opens): %q", swaps.Load(), opened, got)
	}
	t.Logf("%d swaps, %d of 2000 opens succeeded", swaps.Load(), opened)
}
