package bench

import (
	"context"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/protocol"
)

// BenchmarkRelayConnectToFirstOutput is a new client's time from dialling
// the relay to the first output of a command on the executor behind it.
func BenchmarkRelayConnectToFirstOutput(b *testing.B) {
	tg := setup(b)
	connect(b, tg.relay).Close() // the executor has joined
	d := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		s := connect(b, tg.relay)
		p, err := s.Start(context.Background(), protocol.ExecParams{Argv: []string{"echo", "first"}, Env: map[string]string{"PATH": "/usr/bin:/bin"}})
		if err != nil {
			b.Fatal(err)
		}
		for ev := range p.Events() {
			if ev.Kind == client.EventOutput {
				d = append(d, time.Since(t0))
				break
			}
		}
		s.Close()
	}
	percentiles(b, d)
}

// BenchmarkRelayIdleExecutors joins 1,000 executors (each its own key and
// connection) to a relay process and reports the relay's peak RSS.
func BenchmarkRelayIdleExecutors(b *testing.B) {
	const n = 1000
	for i := 0; i < b.N; i++ {
		dir := b.TempDir()
		setup(b)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		rs, err := peers.StartRelay(ctx, outpostBin, filepath.Join(dir, "relay"))
		if err != nil {
			b.Fatal(err)
		}
		tok, err := peers.Token(outpostBin, filepath.Join(dir, "relay"), "--join")
		if err != nil {
			b.Fatal(err)
		}
		srv, _ := executor.NewServer(executor.DefaultConfig())
		joined := make(chan struct{}, n)
		t0 := time.Now()
		for j := 0; j < n; j++ {
			k, _ := identity.Generate()
			go srv.Join(ctx, executor.JoinOptions{RelayURL: rs.URL, Key: k.Keypair(), ID: "idle-" + strconv.Itoa(j), Token: tok,
				Joined: func() { joined <- struct{}{} }})
		}
		for j := 0; j < n; j++ {
			select {
			case <-joined:
			case <-ctx.Done():
				b.Fatalf("%d of %d joined", j, n)
			}
		}
		b.ReportMetric(time.Since(t0).Seconds(), "join-all-s")
		b.ReportMetric(float64(peakRSS(rs.Pid()))/1024, "relay-peak-rss-MiB")
		cancel()
		rs.Stop()
		srv.Shutdown(context.Background())
	}
}
