package bench

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// bwrapProfile is codex's bubblewrap profile for a sandboxed command.
var bwrapProfile = []string{"--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid", "--unshare-net", "--die-with-parent"}

// BenchmarkSandboxOverhead spawns /bin/true to completion: plainly, through
// the executor's process engine without and with outpost's sandbox (the
// helper: namespaces, Landlock, seccomp), and under bubblewrap with
// codex's profile.
func BenchmarkSandboxOverhead(b *testing.B) {
	b.Run("fork-exec", func(b *testing.B) {
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := exec.Command("/bin/true").Run(); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		percentiles(b, d)
	})
	engine := func(b *testing.B, policy any) {
		cfg := executor.DefaultConfig()
		cfg.DefaultCwd = b.TempDir()
		srv, err := executor.NewServer(cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer srv.Shutdown(context.Background())
		sess, err := executor.NewSessionForTest(srv)
		if err != nil {
			b.Fatal(err)
		}
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			p, err := sess.StartProcess(context.Background(), protocol.ExecParams{ProcessID: "b" + strconv.Itoa(i), Argv: []string{"/bin/true"}, Env: map[string]string{}, Sandbox: policy})
			if err != nil {
				b.Fatal(err)
			}
			<-p.Log().Closed()
			d = append(d, time.Since(t0))
		}
		percentiles(b, d)
	}
	b.Run("outpost-unsandboxed", func(b *testing.B) { engine(b, nil) })
	b.Run("outpost-sandbox", func(b *testing.B) {
		if err := sandbox.Probe().Check(sandbox.Policy{Mode: sandbox.ModeWorkspaceWrite}); err != nil {
			b.Skip(err)
		}
		// The helper is the real outpost binary, as in production (not
		// this much larger test binary).
		setup(b)
		sandbox.SetHelperBinary(outpostBin)
		engine(b, map[string]any{"mode": "workspace-write"})
	})
	b.Run("bwrap", func(b *testing.B) {
		bwrap, err := exec.LookPath("bwrap")
		if err != nil {
			b.Skip("bubblewrap is not installed (apt-get install bubblewrap)")
		}
		d := make([]time.Duration, 0, b.N)
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			if err := exec.Command(bwrap, append(bwrapProfile, "/bin/true")...).Run(); err != nil {
				b.Fatal(err)
			}
			d = append(d, time.Since(t0))
		}
		percentiles(b, d)
	})
}
