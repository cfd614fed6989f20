package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// throughputBytes is what one process writes in the throughput benchmark.
const throughputBytes = 256 << 20

type targets struct {
	outpost, native, codex string // URLs; codex empty if unavailable
	codexErr               error
	relay, relayToken      string // the relay's URL and a client token for executor "bench"
}

var benchKey = func() identity.Key {
	k, err := identity.Generate()
	if err != nil {
		panic(err)
	}
	return k
}()

var (
	outpostBin string
	setupOnce  sync.Once
	tg         targets
	servers    []*peers.Server
	tmpDir     string
)

func TestMain(m *testing.M) {
	// The sandbox benchmark's executor re-executes this binary as its
	// sandbox helper.
	if sandbox.IsHelper() {
		sandbox.HelperMain()
	}
	code := m.Run()
	for _, s := range servers {
		s.Stop()
	}
	if tmpDir != "" {
		os.RemoveAll(tmpDir)
	}
	os.Exit(code)
}

func setup(b *testing.B) targets {
	setupOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		var err error
		tmpDir, err = os.MkdirTemp("", "outpost-bench")
		if err != nil {
			b.Fatal(err)
		}
		bin, err := peers.BuildOutpost(tmpDir)
		if err != nil {
			b.Fatal(err)
		}
		outpostBin = bin
		s, err := peers.StartOutpost(ctx, bin)
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, s)
		tg.outpost = s.URL
		s, err = peers.StartOutpostNative(ctx, bin, tmpDir)
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, s)
		tg.native = s.URL
		rs, err := peers.StartRelay(ctx, bin, tmpDir+"/relay")
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, rs)
		tg.relay = rs.URL
		joinTok, err := peers.Token(bin, tmpDir+"/relay", "--join")
		if err != nil {
			b.Fatal(err)
		}
		if tg.relayToken, err = peers.Token(bin, tmpDir+"/relay", "--client"); err != nil {
			b.Fatal(err)
		}
		js, err := peers.StartJoinedExecutor(ctx, bin, rs.URL, joinTok, "bench", tmpDir+"/joined")
		if err != nil {
			b.Fatal(err)
		}
		servers = append(servers, js)
		codexBin, err := peers.CodexBinary()
		if err != nil {
			tg.codexErr = err
			return
		}
		s, err = peers.StartCodex(ctx, codexBin)
		if err != nil {
			tg.codexErr = err
			return
		}
		servers = append(servers, s)
		tg.codex = s.URL
		fmt.Fprintf(os.Stderr, "machine: %s\n", peers.Machine())
	})
	return tg
}

func connect(b *testing.B, url string) *client.Remote {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := client.Options{Key: benchKey, NoResume: true, KnownExecutors: tmpDir + "/known_executors"}
	if url == tg.relay {
		opts.Executor, opts.Token = "bench", tg.relayToken
	}
	var s *client.Remote
	var err error
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		// A joined executor may still be joining.
		if s, err = client.Dial(ctx, url, opts); err == nil || time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// percentiles reports p50 and p99 of the per-operation durations.
func percentiles(b *testing.B, d []time.Duration) {
	if len(d) == 0 {
		return
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	at := func(q float64) float64 {
		i := int(q * float64(len(d)-1))
		return float64(d[i]) / float64(time.Millisecond)
	}
	b.ReportMetric(at(0.50), "p50-ms")
	b.ReportMetric(at(0.99), "p99-ms")
}

func remoteTrue(b *testing.B, s *client.Remote, i int) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := s.Start(ctx, protocol.ExecParams{
		ProcessID: "t" + strconv.Itoa(i),
		Argv:      []string{"/bin/true"},
		Cwd:       "file:///tmp",
		Env:       map[string]string{"PATH": "/usr/bin:/bin"},
	})
	if err != nil {
		b.Fatal(err)
	}
	for range p.Events() {
	}
}

// BenchmarkStartToExit is the round trip from asking for /bin/true to
// knowing it has closed.
func BenchmarkStartToExit(b *testing.B) {
	b.Run("local-fork-exec", func(b *testing.B) {
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
	run := func(b *testing.B, url string) {
		s := connect(b, url)
		remoteTrue(b, s, -1) // warm up
		d := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			remoteTrue(b, s, i)
			d = append(d, time.Since(t0))
		}
		percentiles(b, d)
	}
	b.Run("outpost-ws", func(b *testing.B) { run(b, setup(b).outpost) })
	b.Run("outpost-tcp", func(b *testing.B) { run(b, setup(b).native) })
	b.Run("outpost-relay", func(b *testing.B) { run(b, setup(b).relay) })
	b.Run("codex-ws", func(b *testing.B) {
		tg := setup(b)
		if tg.codex == "" {
			b.Skip(tg.codexErr)
		}
		run(b, tg.codex)
	})
}

// BenchmarkThroughput streams 256 MiB from one process's stdout to the
// client (decoded bytes, counted as they arrive).
func BenchmarkThroughput(b *testing.B) {
	argv := []string{"head", "-c", strconv.Itoa(throughputBytes), "/dev/zero"}
	b.Run("local-pipe", func(b *testing.B) {
		b.SetBytes(throughputBytes)
		for i := 0; i < b.N; i++ {
			cmd := exec.Command(argv[0], argv[1:]...)
			out, err := cmd.StdoutPipe()
			if err != nil {
				b.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				b.Fatal(err)
			}
			n, _ := io.CopyBuffer(io.Discard, out, make([]byte, 64<<10))
			cmd.Wait()
			if n != throughputBytes {
				b.Fatalf("read %d bytes", n)
			}
		}
	})
	run := func(b *testing.B, url string) {
		s := connect(b, url)
		b.SetBytes(throughputBytes)
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			p, err := s.Start(ctx, protocol.ExecParams{
				ProcessID: "h" + strconv.Itoa(i),
				Argv:      argv,
				Cwd:       "file:///tmp",
				Env:       map[string]string{"PATH": "/usr/bin:/bin"},
			})
			if err != nil {
				b.Fatal(err)
			}
			var n int
			for ev := range p.Events() {
				n += len(ev.Data)
			}
			cancel()
			if n != throughputBytes {
				b.Fatalf("received %d bytes, want %d", n, throughputBytes)
			}
		}
	}
	b.Run("outpost-ws", func(b *testing.B) { run(b, setup(b).outpost) })
	b.Run("outpost-tcp", func(b *testing.B) { run(b, setup(b).native) })
	b.Run("outpost-relay", func(b *testing.B) { run(b, setup(b).relay) })
	b.Run("codex-ws", func(b *testing.B) {
		tg := setup(b)
		if tg.codex == "" {
			b.Skip(tg.codexErr)
		}
		run(b, tg.codex)
	})
}
