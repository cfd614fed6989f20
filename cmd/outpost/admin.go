package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/internal/admin"
	"github.com/outpost-exec/outpost/internal/tracing"
	"github.com/outpost-exec/outpost/relay"
)

// startExecutorAdmin serves the executor's metrics on addr (off when addr
// is empty) and sets cfg.Metrics. stopping marks the endpoint not ready
// (shutdown has begun); stop closes it.
func startExecutorAdmin(addr string, cfg *executor.Config, stderr io.Writer) (stopping, stop func(), err error) {
	if addr == "" {
		return func() {}, func() {}, nil
	}
	reg := prometheus.NewRegistry()
	cfg.Metrics = executor.NewMetrics(reg)
	if lb, ok := cfg.Backend.(*engine.LocalBackend); ok && lb.Cgroups != nil {
		m := lb.Cgroups
		reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_executor_cgroups_lingering",
			Help: "Cgroups of finished commands whose background processes still run (bounded; the oldest is killed past it)."},
			func() float64 { return float64(m.Lingering()) }))
	}
	if lb, ok := cfg.Backend.(*engine.LocalBackend); ok {
		pool := func(f func(engine.SandboxPoolStats) float64) func() float64 {
			return func() float64 {
				st, _ := lb.SandboxPoolStats()
				return f(st)
			}
		}
		reg.MustRegister(
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "outpost_executor_sandbox_pool_ready",
				Help: "Pre-started sandbox helpers ready for a command (--sandbox-pool)."}, pool(func(s engine.SandboxPoolStats) float64 { return float64(s.Ready) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_executor_sandbox_pool_taken_total",
				Help: "Sandboxed starts a pre-started helper ran."}, pool(func(s engine.SandboxPoolStats) float64 { return float64(s.Taken) })),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_executor_sandbox_pool_missed_total",
				Help: "Sandboxed starts that started their own helper: the pool was empty, or the helper taken had died."}, pool(func(s engine.SandboxPoolStats) float64 { return float64(s.Missed) })),
		)
	}
	s, err := admin.Listen(addr, reg)
	if err != nil {
		return nil, nil, fmt.Errorf("--admin-listen: %w", err)
	}
	fmt.Fprintf(stderr, "admin: http://%s/metrics\n", s.Addr())
	return s.Stopping, func() { s.Stopping(); s.Close() }, nil
}

// startRelayAdmin serves the relay's metrics on addr (off when empty).
// stopping marks it not ready (the relay is draining); stop closes it.
func startRelayAdmin(addr string, srv *relay.Server, stderr io.Writer) (stopping, stop func(), err error) {
	if addr == "" {
		return func() {}, func() {}, nil
	}
	reg := prometheus.NewRegistry()
	gauge := func(name, help string, f func(relay.Stats) float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, func() float64 { return f(srv.Stats()) })
	}
	reg.MustRegister(
		gauge("outpost_relay_executors", "Executors joined now.", func(s relay.Stats) float64 { return float64(s.Executors) }),
		gauge("outpost_relay_spliced_streams", "Client streams spliced to executors now.", func(s relay.Stats) float64 { return float64(s.SplicedStreams) }),
		gauge("outpost_relay_idle_data_connections", "Executors' pre-dialled data connections waiting for a client now.", func(s relay.Stats) float64 { return float64(s.IdleDataConns) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_data_splices_total", Help: "Clients spliced to an executor's data connection (raw ciphertext, splice(2)), not to a mux stream."},
			func() float64 { return float64(srv.Stats().DataSplices) }),
		gauge("outpost_relay_blocked_addresses", "Source addresses refused for failing too many handshakes.", func(s relay.Stats) float64 { return float64(s.BlockedAddresses) }),
		gauge("outpost_relay_failure_table_entries", "Source addresses (IPv4, or IPv6 /64) with failed handshakes in their window now (at most 16,384).", func(s relay.Stats) float64 { return float64(s.FailureTable.Entries) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_failure_table_evictions_total", Help: "Addresses still in their failure window dropped to make room (a flood from many addresses)."},
			func() float64 { return float64(srv.Stats().FailureTable.Evictions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_blocked_refusals_total", Help: "Connections refused on sight because their address failed too many handshakes."},
			func() float64 { return float64(srv.Stats().FailureTable.Refusals) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_failed_handshakes_total", Help: "Noise handshakes that failed (wrong key, junk, timeout)."},
			func() float64 { return float64(srv.Stats().FailedHandshakes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_spliced_bytes_total", Help: "Bytes spliced between clients and executors, both directions, counted when a stream ends."},
			func() float64 { return float64(srv.Stats().SplicedBytes) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_token_redemptions_total", Help: "Join and client tokens accepted."},
			func() float64 { return float64(srv.Stats().RedeemedTokens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_token_refusals_total", Help: "Tokens refused (unknown, expired, used up, wrong kind)."},
			func() float64 { return float64(srv.Stats().RefusedTokens) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_duplicate_joins_total", Help: "Executor joins refused because the id was joined, and answering, on another connection with the same key (a stolen key, unless an executor is reconnecting)."},
			func() float64 { return float64(srv.Stats().DuplicateJoins) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_revoked_key_joins_total", Help: "Executor joins refused because the key was revoked (outpost executors revoke)."},
			func() float64 { return float64(srv.Stats().RevokedKeyJoins) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_revoked_sessions_total", Help: "Joined executor sessions closed because their key was revoked."},
			func() float64 { return float64(srv.Stats().RevokedSessions) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_revoked_client_connections_total", Help: "Client connections closed because their token was revoked (outpost token revoke)."},
			func() float64 { return float64(srv.Stats().RevokedClients) }),
	)
	if srv.Stats().Clustered {
		reg.MustRegister(
			gauge("outpost_relay_cluster_attached", "1 while the relay holds its etcd lease (a member of its cluster), 0 while detached.", func(s relay.Stats) float64 { return b2f(s.Attached) }),
			gauge("outpost_relay_cluster_members", "Live relays of the cluster, by the watched member list.", func(s relay.Stats) float64 { return float64(s.ClusterMembers) }),
			gauge("outpost_relay_cluster_executors", "Executors joined anywhere in the cluster, by the watched presence.", func(s relay.Stats) float64 { return float64(s.ClusterExecutors) }),
			gauge("outpost_relay_peer_links", "Links from this relay to its peers, up now.", func(s relay.Stats) float64 { return float64(s.PeerLinks) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_forwarded_total", Help: "Clients forwarded one hop to the peer relay holding their executor."},
				func() float64 { return float64(srv.Stats().Forwarded) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_forward_failures_total", Help: "Clients whose executor's holding peers all failed to take them."},
				func() float64 { return float64(srv.Stats().ForwardFailures) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_presence_writes_total", Help: "Executor presence puts and deletes written to etcd."},
				func() float64 { return float64(srv.Stats().PresenceWrites) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "outpost_relay_presence_txns_total", Help: "The etcd transactions that wrote the presence (at most 100 operations each)."},
				func() float64 { return float64(srv.Stats().PresenceTxns) }),
		)
	}
	peers := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		ps := srv.Peers()
		if ps == nil {
			ps = []relay.PeerStatus{}
		}
		json.NewEncoder(w).Encode(map[string]any{"ready": errText(srv.Ready()), "peers": ps})
	})
	s, err := admin.ListenWith(addr, reg, admin.Options{Ready: srv.Ready, Handlers: map[string]http.Handler{"/peers": peers}})
	if err != nil {
		return nil, nil, fmt.Errorf("--admin-listen: %w", err)
	}
	fmt.Fprintf(stderr, "admin: http://%s/metrics\n", s.Addr())
	return s.Stopping, func() { s.Stopping(); s.Close() }, nil
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// errText is "ok", or err's text.
func errText(err error) string {
	if err != nil {
		return err.Error()
	}
	return "ok"
}

// flushSpans exports the spans still queued, for at most 5 s.
func flushSpans(shutdown func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	shutdown(ctx)
}

// executorTracing sets cfg.TracerProvider from the OTEL_EXPORTER_OTLP_*
// environment; the returned func flushes at exit.
func executorTracing(cfg *executor.Config, stderr io.Writer) func() {
	tp, shutdown, err := tracing.FromEnv(context.Background(), "outpost-executor")
	if err != nil {
		fmt.Fprintln(stderr, "outpost: tracing off:", err)
		return func() {}
	}
	if tp == nil {
		return func() {}
	}
	cfg.TracerProvider = tp
	return func() { flushSpans(shutdown) }
}
