package executor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// An operator must see output that nobody read before retention dropped
// it; a process that closes after evicting is counted once, by totals.
func TestMetricsCountRetentionEvictionsWhenProcessCloses(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	l := engine.NewEventLog(engine.Retention{MaxBytes: 1 << 20, MaxChunks: 1}, 1)
	m.started()
	for _, s := range []string{"aa", "bbb", "c"} {
		mustAppend(t, l, protocol.StreamStdout, s)
	}
	l.Exit(0, false)
	l.StreamEOF()
	<-l.Closed()
	m.exited(l.Snapshot())
	if got := testutil.ToFloat64(m.evictedChunks); got != 2 {
		t.Fatalf("evicted chunks %v, want 2", got)
	}
	if got := testutil.ToFloat64(m.evictedBytes); got != 5 {
		t.Fatalf("evicted bytes %v, want 5", got)
	}
	if got := testutil.ToFloat64(m.running); got != 0 {
		t.Fatalf("running %v", got)
	}
}
