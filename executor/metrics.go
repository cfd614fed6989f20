package executor

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/internal/admission"
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
	// The native listener's admission (see handshakeGate): connections
	// closed before their handshake began or finished, handshakes that
	// failed, addresses that crossed the failure limit, connections
	// still handshaking, and (summed over live listeners) addresses
	// refused now.
	refusedConns      *prometheus.CounterVec
	failedHandshakes  *prometheus.CounterVec
	addressBlocks     prometheus.Counter
	pendingHandshakes prometheus.Gauge

	gatesMu sync.Mutex
	gates   map[*handshakeGate]struct{} // one per live native listener
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
		refusedConns: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outpost_executor_refused_connections_total",
			Help: "tcp:// and unix:// connections closed before their Noise handshake, by reason: blocked (refused at accept: the address failed too many handshakes lately), evicted (the oldest pending connection of its address, or of the fullest address, when a newer one needed its slot; idle ones first)."}, []string{"reason"}),
		failedHandshakes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "outpost_executor_failed_handshakes_total",
			Help: "tcp:// and unix:// Noise handshakes that failed, by reason: silent (no first byte within --first-byte-timeout), timeout (not finished within --handshake-timeout), slow (evicted after handshaking for over a second), unauthorized (the client key is not in --authorized-clients), error (junk, wrong executor key, hang-up)."}, []string{"reason"}),
		addressBlocks: prometheus.NewCounter(prometheus.CounterOpts{Name: "outpost_executor_address_blocks_total",
			Help: "Times a source address failed --max-failed-handshakes handshakes within the window and was refused for the rest of it."}),
		pendingHandshakes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "outpost_executor_handshakes_pending",
			Help: "tcp:// and unix:// connections accepted whose Noise handshake has not finished."}),
		gates: map[*handshakeGate]struct{}{},
	}
	for _, r := range []string{refusedBlocked, refusedEvicted} {
		m.refusedConns.WithLabelValues(r)
	}
	for _, r := range []string{failSilent, failTimeout, failSlow, failUnauthorized, failError} {
		m.failedHandshakes.WithLabelValues(r)
	}
	blocked := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_executor_blocked_addresses",
		Help: "Source addresses the tcp:// and unix:// listeners refuse now, for failing too many handshakes."}, m.blockedAddresses)
	entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_executor_failure_table_entries",
		Help: "Source addresses (IPv4, or IPv6 /64) with failed handshakes in their window now, over the listeners (at most 16,384 each)."},
		func() float64 { return float64(m.failureTables().Entries) })
	evictions := prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_executor_failure_table_evictions_total",
		Help: "Addresses still in their failure window dropped to make room (a flood from many addresses), over the listeners."},
		func() float64 { return float64(m.failureTables().Evictions) })
	reg.MustRegister(m.starts, m.exits, m.denials, m.running, m.evictedChunks, m.evictedBytes, m.oomKills, m.pidsRefusals,
		m.refusedConns, m.failedHandshakes, m.addressBlocks, m.pendingHandshakes, blocked, entries, evictions)
	return m
}

// refused counts a connection closed before its handshake.
func (m *Metrics) refused(reason string) {
	if m != nil {
		m.refusedConns.WithLabelValues(reason).Inc()
	}
}

// handshakeFailed counts a failed handshake.
func (m *Metrics) handshakeFailed(reason string) {
	if m != nil {
		m.failedHandshakes.WithLabelValues(reason).Inc()
	}
}

// addressBlocked counts an address crossing the failure limit.
func (m *Metrics) addressBlocked() {
	if m != nil {
		m.addressBlocks.Inc()
	}
}

// handshakesPending moves the gauge of connections still handshaking.
func (m *Metrics) handshakesPending(delta int) {
	if m != nil {
		m.pendingHandshakes.Add(float64(delta))
	}
}

// watchGate adds (or, with on false, removes) a listener's gate to the
// blocked-addresses gauge.
func (m *Metrics) watchGate(g *handshakeGate, on bool) {
	if m == nil {
		return
	}
	m.gatesMu.Lock()
	defer m.gatesMu.Unlock()
	if on {
		m.gates[g] = struct{}{}
	} else {
		delete(m.gates, g)
	}
}

func (m *Metrics) blockedAddresses() float64 {
	m.gatesMu.Lock()
	defer m.gatesMu.Unlock()
	n := 0
	for g := range m.gates {
		n += g.blockedCount()
	}
	return float64(n)
}

// failureTables sums the watched gates' failure tables.
func (m *Metrics) failureTables() admission.Stats {
	m.gatesMu.Lock()
	defer m.gatesMu.Unlock()
	var sum admission.Stats
	for g := range m.gates {
		st := g.failures.Stats()
		sum.Entries += st.Entries
		sum.Evictions += st.Evictions
	}
	return sum
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
func (m *Metrics) exited(ev engine.Snapshot) {
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
