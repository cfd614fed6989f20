package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is one measured row. The JSON names are the interface other tools
// read (see the package comment); absent figures are omitted.
type Result struct {
	Metric string   `json:"metric"` // start_to_exit | throughput | concurrency | idle_executors | sandbox_overhead | copy | copy_down | codex_turn | cluster_hop | cluster_failover | cluster_scale
	Target string   `json:"target"` // local-limit | outpost-local | outpost-direct | outpost-ws | outpost-relay | codex | ssh | ssh-controlmaster | bwrap | codex-exec-server | outpost-bridge-relay | ...
	Runs   int      `json:"runs,omitempty"`
	P50Ms  *float64 `json:"p50_ms,omitempty"`
	P99Ms  *float64 `json:"p99_ms,omitempty"`
	MBps   *float64 `json:"mbps,omitempty"`
	// OverheadMs is sandbox_overhead's p50 over its unsandboxed base, and
	// cluster_hop's start-to-exit p50 through the hop over the single
	// relay's.
	OverheadMs *float64 `json:"overhead_ms,omitempty"`
	WallS      *float64 `json:"wall_s,omitempty"`
	Errors     *int     `json:"errors,omitempty"`
	// RSSPerExecutorKiB is the relay's resident memory per joined executor.
	RSSPerExecutorKiB *float64 `json:"rss_per_executor_kib,omitempty"`
	// VsLimit and VsBestPeer compare the headline figure (p50, MB/s or
	// overhead) with the local limit and with the best peer (codex or
	// codex-exec-server, ssh, bwrap): time / time, or rate / rate.
	VsLimit    *float64 `json:"vs_limit,omitempty"`
	VsBestPeer *float64 `json:"vs_best_peer,omitempty"`
	// PoolTaken and PoolMissed: of a sandbox_overhead row's starts, those
	// a pre-started helper ran and those that started their own.
	PoolTaken  *int `json:"pool_taken,omitempty"`
	PoolMissed *int `json:"pool_missed,omitempty"`
	// FirstOutputP50Ms and FirstOutputP99Ms: cluster_hop's connect → first
	// output byte (a new client connection and a command printing a line).
	FirstOutputP50Ms *float64 `json:"first_output_p50_ms,omitempty"`
	FirstOutputP99Ms *float64 `json:"first_output_p99_ms,omitempty"`
	// VsBase is cluster_hop's connect → first output p50 through the hop
	// over the single relay's.
	VsBase *float64 `json:"vs_base,omitempty"`
	// WritesPerS and TxnsPerS: cluster_scale's restart storm, per second
	// of its writing phase: the restarted relay's presence writes to etcd
	// (outpost_relay_presence_writes_total) and the transactions carrying
	// them (the relay's count when it exports one, else etcd's own).
	WritesPerS *float64 `json:"writes_per_s,omitempty"`
	TxnsPerS   *float64 `json:"txns_per_s,omitempty"`
	// Notes say what a row's figures are when the columns do not (the
	// cluster metrics: what was killed, targets met or not).
	Notes string `json:"notes,omitempty"`
	// Skipped says why a row has no figures.
	Skipped string `json:"skipped,omitempty"`
}

// Report is what --json writes.
type Report struct {
	Machine string    `json:"machine"`
	Date    time.Time `json:"date"`
	Results []Result  `json:"results"`
}

func f64(v float64) *float64 { return &v }

// isPeer reports whether a target is something users would use instead:
// codex's exec-server ("codex", and "codex-exec-server" in codex_turn,
// where the other targets are exec-servers too), ssh, scp, bubblewrap.
func isPeer(target string) bool {
	return target == "codex" || target == "codex-exec-server" || strings.HasPrefix(target, "ssh") || target == "scp" || target == "bwrap"
}

// headline is the figure a row is compared by, and whether higher is better.
func headline(r Result) (v float64, higherBetter, ok bool) {
	switch {
	case r.Metric == "sandbox_overhead":
		// Compared by what the sandbox adds; the bases have no overhead.
		if r.OverheadMs != nil {
			return *r.OverheadMs, false, true
		}
		return 0, false, false
	case r.MBps != nil:
		return *r.MBps, true, true
	case r.P50Ms != nil:
		return *r.P50Ms, false, true
	}
	return 0, false, false
}

// compare fills VsLimit and VsBestPeer within each metric.
func compare(rs []Result) {
	byMetric := map[string][]int{}
	for i, r := range rs {
		byMetric[r.Metric] = append(byMetric[r.Metric], i)
	}
	for _, idx := range byMetric {
		var limit, best *float64
		for _, i := range idx {
			v, higher, ok := headline(rs[i])
			if !ok {
				continue
			}
			if rs[i].Target == "local-limit" {
				limit = f64(v)
			}
			if isPeer(rs[i].Target) && (best == nil || (higher && v > *best) || (!higher && v < *best)) {
				best = f64(v)
			}
		}
		for _, i := range idx {
			v, _, ok := headline(rs[i])
			if !ok {
				continue
			}
			if limit != nil && *limit > 0 && rs[i].Target != "local-limit" {
				rs[i].VsLimit = f64(v / *limit)
			}
			if best != nil && *best > 0 && !isPeer(rs[i].Target) && rs[i].Target != "local-limit" {
				rs[i].VsBestPeer = f64(v / *best)
			}
		}
	}
}

// writeMarkdown prints the table.
func writeMarkdown(w io.Writer, rep Report) {
	fmt.Fprintf(w, "Machine: %s; %s\n\n", rep.Machine, rep.Date.Format("2006-01-02"))
	fmt.Fprintln(w, "| metric | target | runs | p50 ms | p99 ms | MB/s | other | × limit | × best peer |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
	num := func(p *float64, prec int) string {
		if p == nil {
			return ""
		}
		return fmt.Sprintf("%.*f", prec, *p)
	}
	for _, r := range rep.Results {
		var other []string
		if r.OverheadMs != nil {
			other = append(other, fmt.Sprintf("overhead %+.2f ms", *r.OverheadMs))
		}
		if r.WallS != nil {
			other = append(other, fmt.Sprintf("wall %.2f s", *r.WallS))
		}
		if r.PoolTaken != nil && r.PoolMissed != nil {
			other = append(other, fmt.Sprintf("%d pooled, %d not", *r.PoolTaken, *r.PoolMissed))
		}
		if r.Errors != nil {
			other = append(other, fmt.Sprintf("%d errors", *r.Errors))
		}
		if r.RSSPerExecutorKiB != nil {
			other = append(other, fmt.Sprintf("%.0f KiB per executor", *r.RSSPerExecutorKiB))
		}
		if r.FirstOutputP50Ms != nil && r.FirstOutputP99Ms != nil {
			other = append(other, fmt.Sprintf("connect→first output p50 %.2f / p99 %.2f ms", *r.FirstOutputP50Ms, *r.FirstOutputP99Ms))
		}
		if r.VsBase != nil {
			other = append(other, fmt.Sprintf("%.2f× base", *r.VsBase))
		}
		if r.WritesPerS != nil {
			other = append(other, fmt.Sprintf("%.0f writes/s", *r.WritesPerS))
		}
		if r.TxnsPerS != nil {
			other = append(other, fmt.Sprintf("%.0f txns/s", *r.TxnsPerS))
		}
		if r.Notes != "" {
			other = append(other, r.Notes)
		}
		if r.Skipped != "" {
			other = append(other, "skipped: "+r.Skipped)
		}
		runs := ""
		if r.Runs > 0 {
			runs = fmt.Sprint(r.Runs)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Metric, r.Target, runs,
			num(r.P50Ms, 2), num(r.P99Ms, 2), num(r.MBps, 0), strings.Join(other, "; "), num(r.VsLimit, 2), num(r.VsBestPeer, 2))
	}
}
