package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

func TestCompareRatesAgainstTheLimitAndTheBestPeer(t *testing.T) {
	rs := []Result{
		{Metric: "start_to_exit", Target: "local-limit", P50Ms: f64(0.5)},
		{Metric: "start_to_exit", Target: "outpost-relay", P50Ms: f64(1.5)},
		{Metric: "start_to_exit", Target: "codex", P50Ms: f64(6)},
		{Metric: "start_to_exit", Target: "ssh-controlmaster", P50Ms: f64(3)},
		{Metric: "start_to_exit", Target: "ssh", Skipped: "no sshd"},
		{Metric: "throughput", Target: "local-limit", MBps: f64(2000)},
		{Metric: "throughput", Target: "outpost-direct", MBps: f64(600)},
		{Metric: "throughput", Target: "ssh", MBps: f64(300)},
		{Metric: "sandbox_overhead", Target: "local-limit", P50Ms: f64(0.6)},
		{Metric: "sandbox_overhead", Target: "outpost-sandbox", P50Ms: f64(6), OverheadMs: f64(4)},
		{Metric: "sandbox_overhead", Target: "bwrap", P50Ms: f64(10), OverheadMs: f64(8)},
	}
	compare(rs)
	want := func(i int, vsLimit, vsPeer *float64) {
		t.Helper()
		eq := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
		if !eq(rs[i].VsLimit, vsLimit) || !eq(rs[i].VsBestPeer, vsPeer) {
			t.Errorf("%s/%s: vs limit %v, vs peer %v", rs[i].Metric, rs[i].Target, deref(rs[i].VsLimit), deref(rs[i].VsBestPeer))
		}
	}
	want(0, nil, nil)
	want(1, f64(3), f64(0.5)) // 3x the limit, half the best peer's (ssh-controlmaster) time
	want(2, f64(12), nil)     // peers are not compared with themselves
	want(4, nil, nil)         // skipped
	want(6, f64(0.3), f64(2)) // 30% of the pipe, twice ssh
	want(9, nil, f64(0.5))    // half bubblewrap's overhead; no limit for an overhead
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestMarkdownShowsSkippedRowsWithTheirReason(t *testing.T) {
	var buf bytes.Buffer
	writeMarkdown(&buf, Report{Machine: "m", Date: time.Unix(0, 0).UTC(), Results: []Result{{Metric: "throughput", Target: "codex", Skipped: "npm unreachable"}}})
	if !strings.Contains(buf.String(), "| throughput | codex |") || !strings.Contains(buf.String(), "skipped: npm unreachable") {
		t.Fatal(buf.String())
	}
}
