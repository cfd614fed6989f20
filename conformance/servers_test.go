package conformance

import (
	"context"
	"github.com/outpost-exec/outpost/internal/wine"
	"os"
	"sync"
	"testing"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// built is cmd/outpost, built once for every test of the package.
var built struct {
	once     sync.Once
	dir, bin string
	err      error
}

func TestMain(m *testing.M) {
	code := m.Run()
	wine.Cleanup()
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	os.Exit(code)
}

// outpostBinary is this checkout's outpost, built once.
func outpostBinary(t *testing.T) string {
	t.Helper()
	built.once.Do(func() {
		if built.dir, built.err = os.MkdirTemp("", "outpost-conformance-"); built.err == nil {
			built.bin, built.err = peers.BuildOutpost(built.dir)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// bothServers starts outpost's executor and codex's own exec-server
// (peers.CodexVersion) on ws://, each with env, for the rest of t; it
// skips t when codex is not installed.
func bothServers(t *testing.T, env ...string) (ours, theirs *peers.Server) {
	t.Helper()
	codexBin, err := peers.CodexBinary()
	if err != nil {
		testdeps.Missing(t, "codex", "skipping the differential test: %v", err)
	}
	bin := outpostBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
	defer cancel()
	if ours, err = peers.StartOutpost(ctx, bin, env...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ours.Stop)
	if theirs, err = peers.StartCodex(ctx, codexBin, env...); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(theirs.Stop)
	return ours, theirs
}
