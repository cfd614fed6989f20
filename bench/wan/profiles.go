package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/outpost-exec/outpost/bench/wan/netem"
)

// The three links of the topology. The relay path (cli-rly + rly-exe)
// and the direct one (cli-exe) have the same round trip in every profile,
// so the relay costs only its own processing and the extra TCP hop.
var linkNames = []string{"cli-rly", "rly-exe", "cli-exe"}

// profile is a set of link settings and the sizes that suit them.
type profile struct {
	name, desc string
	links      map[string]netem.Config
	pathRTT    time.Duration // client → executor, both paths
	// throughput and copy sizes, normal and -quick; a throughput run also
	// stops at thrCap (rate so far), a copy fails at copyCap.
	thrBytes, thrQuick, copyBytes, copyQuick int64
	thrCap, copyCap                          time.Duration
	metrics                                  []string // nil: every metric
}

const mb = 1 << 20

var allMetrics = []string{"rtt", "cold_start", "warm_start", "throughput", "copy_up", "copy_down", "exactly_once"}

// split makes the links of a profile: half the path's round trip on each
// relay hop, all of it on the direct link; rate in bit/s (0: unlimited);
// loss per link and direction. The drop-tail queue is 1.5× the path's
// bandwidth-delay product on every link.
func split(rtt time.Duration, rate, loss float64) map[string]netem.Config {
	q := 0
	if rate > 0 {
		q = netem.BDPQueue(rate, rtt, 1.5)
	}
	hop := netem.Config{Rate: rate, Delay: rtt / 4, Loss: loss, Queue: q}
	direct := netem.Config{Rate: rate, Delay: rtt / 2, Loss: loss, Queue: q}
	return map[string]netem.Config{"cli-rly": hop, "rly-exe": hop, "cli-exe": direct}
}

var profiles = []profile{
	{name: "regional", desc: "40 ms client↔executor RTT (20 + 20 ms through the relay), 1 Gbit/s, no loss",
		links: split(40*time.Millisecond, 1e9, 0), pathRTT: 40 * time.Millisecond,
		thrBytes: 256 * mb, thrQuick: 64 * mb, copyBytes: 128 * mb, copyQuick: 32 * mb, thrCap: 20 * time.Second, copyCap: 90 * time.Second},
	{name: "intercontinental", desc: "160 ms client↔executor RTT (80 + 80 ms through the relay), 100 Mbit/s, no loss",
		links: split(160*time.Millisecond, 100e6, 0), pathRTT: 160 * time.Millisecond,
		thrBytes: 96 * mb, thrQuick: 32 * mb, copyBytes: 48 * mb, copyQuick: 16 * mb, thrCap: 20 * time.Second, copyCap: 90 * time.Second},
	{name: "lossy", desc: "regional with 1% random loss on every link, each direction (about 2% through the relay's two hops)",
		links: split(40*time.Millisecond, 1e9, 0.01), pathRTT: 40 * time.Millisecond,
		thrBytes: 32 * mb, thrQuick: 8 * mb, copyBytes: 16 * mb, copyQuick: 4 * mb, thrCap: 15 * time.Second, copyCap: 90 * time.Second},
	{name: "40ms", desc: "40 ms RTT, no rate limit, no loss: single-stream throughput against the windows",
		links: split(40*time.Millisecond, 0, 0), pathRTT: 40 * time.Millisecond,
		thrBytes: 256 * mb, thrQuick: 64 * mb, thrCap: 20 * time.Second, metrics: []string{"rtt", "throughput"}},
	{name: "160ms", desc: "160 ms RTT, no rate limit, no loss: single-stream throughput against the windows",
		links: split(160*time.Millisecond, 0, 0), pathRTT: 160 * time.Millisecond,
		thrBytes: 256 * mb, thrQuick: 64 * mb, thrCap: 20 * time.Second, metrics: []string{"rtt", "throughput"}},
}

// defaultProfiles run when -profiles is not given.
const defaultProfiles = "regional,intercontinental,lossy"

// pickProfiles resolves a comma-separated list ("all" for every profile).
func pickProfiles(list string) ([]profile, error) {
	if strings.TrimSpace(list) == "all" {
		return profiles, nil
	}
	var out []profile
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		i := slices.IndexFunc(profiles, func(p profile) bool { return p.name == name })
		if i < 0 {
			var names []string
			for _, p := range profiles {
				names = append(names, p.name)
			}
			return nil, fmt.Errorf("unknown profile %q (have %s, or all)", name, strings.Join(names, ", "))
		}
		out = append(out, profiles[i])
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no profile named in %q", list)
	}
	return out, nil
}

// pickMetrics resolves -only.
func pickMetrics(list string) ([]string, error) {
	if list == "" {
		return allMetrics, nil
	}
	var out []string
	for _, m := range strings.Split(list, ",") {
		m = strings.TrimSpace(m)
		if !slices.Contains(allMetrics, m) {
			return nil, fmt.Errorf("unknown metric %q (have %s)", m, strings.Join(allMetrics, ", "))
		}
		out = append(out, m)
	}
	return out, nil
}
