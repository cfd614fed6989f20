package bench

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// BenchmarkConnect is the time to open a session: TCP connect, Noise IK
// handshake, yamux, initialize.
func BenchmarkConnect(b *testing.B) {
	url := setup(b).native
	b.ResetTimer()
	d := make([]time.Duration, 0, b.N)
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s := connect(b, url)
		d = append(d, time.Since(t0))
		s.Close()
	}
	percentiles(b, d)
}

// BenchmarkConcurrent1000 runs 1,000 concurrent `sleep 1` processes over
// one connection and reports the wall time and the executor's peak RSS.
func BenchmarkConcurrent1000(b *testing.B) {
	tg := setup(b)
	s := connect(b, tg.native)
	const n = 1000
	for i := 0; i < b.N; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for j := 0; j < n; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				p, err := s.Start(ctx, protocol.ExecParams{
					ProcessID: "c" + strconv.Itoa(i) + "-" + strconv.Itoa(j),
					Argv:      []string{"sleep", "1"},
					Env:       map[string]string{"PATH": "/usr/bin:/bin"},
				})
				if err != nil {
					errs <- err
					return
				}
				if res, err := p.Wait(ctx); err != nil || res.ExitCode != 0 {
					errs <- err
				}
			}()
		}
		wg.Wait()
		cancel()
		close(errs)
		failed := 0
		for range errs {
			failed++
		}
		b.ReportMetric(time.Since(t0).Seconds(), "wall-s")
		b.ReportMetric(float64(failed), "errors")
	}
	if rss := peakRSS(servers[1].Pid()); rss > 0 {
		b.ReportMetric(float64(rss)/1024, "executor-peak-rss-MiB")
	}
}

// peakRSS reads a process's VmHWM in KiB.
func peakRSS(pid int) int64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmHWM:"); ok {
			n, _ := strconv.ParseInt(strings.Fields(v)[0], 10, 64)
			return n
		}
	}
	return 0
}
