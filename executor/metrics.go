package executor

import (
	"github.com/prometheus/client_golang/prometheus"
)

// Metrics count what the executor does, for Prometheus. A nil *Metrics
// counts nothing.
type Metrics struct {
	starts  prometheus.Counter
	exits   *prometheus.CounterVec
	denials prometheus.Counter
	running prometheus.Gauge
	// Retention evictions are counted when the process closes, from its
	// log's totals, so the hot output path stays free of metric calls.
	evictedChunks prometheus.Counter
	evictedBytes  prometheus.Counter
	// Limit hits are read from the command's cgroup as it exits.
	oomKills     prometheus.Counter
	pidsRefusals prometheus.Counter
}

// NewMetrics registers the executor's metrics on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		starts:        prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_process_starts_total", Help: "Processes started."}),
		exits:         prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outpost_executor_process_exits_total", Help: "Processes exited, by class (ok, error, signal, sandbox_denied)."}, []string{"class"}),
		denials:       prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_sandbox_denials_total", Help: "Sandboxed processes whose failure was classified as a sandbox denial."}),
		running:       prometheus.NewGauge(prometheus.GaugeOpts{Name: "outpost_executor_processes_running", Help: "Processes started and not yet exited."}),
		evictedChunks: prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_retention_evicted_chunks_total", Help: "Output chunks dropped from a process's retention buffer before any reader took them (counted when the process closes)."}),
		evictedBytes:  prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_retention_evicted_bytes_total", Help: "Output bytes dropped from retention before any reader took them (counted when the process closes)."}),
		oomKills:      prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_oom_kills_total", Help: "Processes the OOM killer took inside commands' cgroups (--memory-max)."}),
		pidsRefusals:  prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_pids_limit_refusals_total", Help: "Forks refused inside commands' cgroups (--pids-max)."}),
	}
	reg.MustRegister(m.starts, m.exits, m.denials, m.running, m.evictedChunks, m.evictedBytes, m.oomKills, m.pidsRefusals)
	return m
}

func (m *Metrics) started() {
	if m != nil {
		m.starts.Inc()
		m.running.Inc()
	}
}

// limitHits records what a command's cgroup limits refused it.
func (m *Metrics) limitHits(oomKills, pidsRefusals int) {
	if m != nil {
		m.oomKills.Add(float64(oomKills))
		m.pidsRefusals.Add(float64(pidsRefusals))
	}
}

// exited records a closed process.
func (m *Metrics) exited(ev Snapshot) {
	if m == nil {
		return
	}
	m.running.Dec()
	class := "ok"
	switch {
	case ev.SandboxDenied:
		class = "sandbox_denied"
		m.denials.Inc()
	case ev.Signal != 0:
		class = "signal"
	case ev.ExitCode != 0:
		class = "error"
	}
	m.exits.WithLabelValues(class).Inc()
	m.evictedChunks.Add(float64(ev.EvictedChunks))
	m.evictedBytes.Add(float64(ev.EvictedBytes))
}
