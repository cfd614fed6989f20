//go:build linux && soak

package hardening

// The soak: make soak (go test -tags soak). Minutes, not hours:
// OUTPOST_SOAK_COMMANDS short commands (default 100,000) and
// OUTPOST_SOAK_GIB GiB of output (default 10) through a relay to a joined
// executor, both real processes, with every byte checked.

import (
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rssKiB is a process's resident set.
func rssKiB(pid int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")))
			return n
		}
	}
	return 0
}

// peakRSS samples the daemons' RSS until stop is closed.
type peakRSS struct {
	mu   sync.Mutex
	peak map[string]int
}

func watchRSS(ds []*daemon, stop <-chan struct{}) *peakRSS {
	p := &peakRSS{peak: map[string]int{}}
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			p.mu.Lock()
			for _, d := range ds {
				p.peak[d.name] = max(p.peak[d.name], rssKiB(d.cmd.Process.Pid))
			}
			p.mu.Unlock()
			select {
			case <-t.C:
			case <-stop:
				return
			}
		}
	}()
	return p
}

func (p *peakRSS) get(name string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.peak[name]
}

func TestSoakThroughTheRelay(t *testing.T) {
	commands := envInt("OUTPOST_SOAK_COMMANDS", 100_000)
	gib := envInt("OUTPOST_SOAK_GIB", 10)
	dir := t.TempDir()
	rl := startDaemon(t, "relay", true, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", filepath.Join(dir, "relay"))
	joinTok := tokenCreate(t, filepath.Join(dir, "relay"), "--join")
	clientTok := tokenCreate(t, filepath.Join(dir, "relay"), "--client")
	ex := startDaemon(t, "executor", false, "executor", "join", "--relay", rl.url, "--token", joinTok, "--id", "soak", "--state-dir", filepath.Join(dir, "exec"),
		"--detached-ttl", "1s", "--closed-retention", "1s")
	dial := func() *client.Remote {
		deadline := time.Now().Add(20 * time.Second)
		for {
			env, err := client.Dial(ctxT(t, 10*time.Second), rl.url, client.Config{Executor: "soak", Token: clientTok, KnownExecutors: filepath.Join(dir, "known")})
			if err == nil {
				return env
			}
			if time.Now().After(deadline) {
				t.Fatal(err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	warm := dial()
	mustEcho(t, warm, "warm")
	warm.Close()
	daemons := []*daemon{rl, ex}
	base := baseline(t, daemons...)
	stop := make(chan struct{})
	peaks := watchRSS(daemons, stop)
	defer close(stop)
	clientGoroutines := runtime.NumGoroutine()

	// Phase 1: short commands, 32 at a time over one connection; each
	// prints its own number, which must come back exactly once.
	env := dial()
	start := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				n := next.Add(1)
				if n > int64(commands) {
					return
				}
				want := strconv.FormatInt(n, 10)
				out, err := client.Command(env, "/bin/echo", want).Output()
				if err != nil || string(out) != want+"\n" {
					if failed.Add(1) <= 5 {
						t.Errorf("command %d: %q %v", n, out, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	cmdWall := time.Since(start)
	env.Close()
	if failed.Load() != 0 {
		t.Fatalf("%d of %d commands failed or lost output", failed.Load(), commands)
	}
	t.Logf("phase 1: %d commands in %v (%.0f/s)", commands, cmdWall.Round(time.Millisecond), float64(commands)/cmdWall.Seconds())
	settle(t, base)
	rssAfterCommands := map[string]int{rl.name: peaks.get(rl.name), ex.name: peaks.get(ex.name)}

	// Phase 2: GiB of output from parallel processes. seq's lines all
	// differ, so a lost, duplicated or reordered chunk changes the digest,
	// which is compared with the same command run here.
	const perProc = 120_000_000 // seq 1..N is 1,038,888,898 bytes
	want := localDigest(t, "seq", "1", strconv.Itoa(perProc))
	env = dial()
	start = time.Now()
	var total atomic.Int64
	sem := make(chan struct{}, 4)
	for i := range gib {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			p, err := env.Start(ctxT(t, 10*time.Minute), protocol.ExecParams{Argv: []string{"seq", "1", strconv.Itoa(perProc)}, Env: env0})
			if err != nil {
				t.Errorf("stream %d: %v", i, err)
				return
			}
			h := sha256.New()
			var n int64
			for ev := range p.Events() {
				if ev.Kind == client.EventFailed {
					t.Errorf("stream %d: %v", i, ev.Err)
					return
				}
				h.Write(ev.Data)
				n += int64(len(ev.Data))
			}
			total.Add(n)
			if got := fmt.Sprintf("%x/%d", h.Sum(nil), n); got != want {
				t.Errorf("stream %d: digest %s, want %s", i, got, want)
			}
		}()
	}
	wg.Wait()
	streamWall := time.Since(start)
	env.Close()
	t.Logf("phase 2: %.2f GiB in %v (%.0f MB/s), digests match", float64(total.Load())/(1<<30), streamWall.Round(time.Millisecond), float64(total.Load())/streamWall.Seconds()/1e6)
	settle(t, base)

	// The client's own goroutines are back too.
	deadline := time.Now().Add(settleTimeout)
	for runtime.NumGoroutine() > clientGoroutines {
		if time.Now().After(deadline) {
			t.Fatalf("client goroutines %d, were %d", runtime.NumGoroutine(), clientGoroutines)
		}
		time.Sleep(25 * time.Millisecond)
	}
	for _, d := range daemons {
		u := d.usage(t)
		t.Logf("%s: baseline %+v, after %+v; peak RSS %d MiB after phase 1, %d MiB overall; RSS now %d MiB",
			d.name, base[d], u, rssAfterCommands[d.name]>>10, peaks.get(d.name)>>10, rssKiB(d.cmd.Process.Pid)>>10)
		// Bounded: retention (8 MiB per process), mux windows (4 MiB per
		// stream) and buffers, not the volume that went through.
		if peak := peaks.get(d.name) >> 10; peak > 256 {
			t.Errorf("%s peaked at %d MiB of RSS", d.name, peak)
		}
	}
}

// localDigest runs argv here and returns its output's sha256/length.
func localDigest(t *testing.T, argv ...string) string {
	cmd := exec.Command(argv[0], argv[1:]...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	h := sha256.New()
	n, err := io.Copy(h, out)
	if err != nil || cmd.Wait() != nil {
		t.Fatalf("%v: %v", argv, err)
	}
	return fmt.Sprintf("%x/%d", h.Sum(nil), n)
}
