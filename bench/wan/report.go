package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Result is one measured row. The JSON names follow bench/report.go's
// (metric, target, runs, p50_ms, p99_ms, mbps, errors, skipped) and add
// the WAN figures; absent figures are omitted.
type Result struct {
	Profile string   `json:"profile"` // calibration | regional | intercontinental | lossy | 40ms | 160ms
	Metric  string   `json:"metric"`  // delay_line | rtt | cold_start | warm_start | throughput | copy_up | copy_down | exactly_once
	Target  string   `json:"target"`  // outpost-relay | outpost-direct | ssh | ssh-controlmaster | scp | tcp | a link (cli-rly, rly-exe, cli-exe)
	Runs    int      `json:"runs,omitempty"`
	P50Ms   *float64 `json:"p50_ms,omitempty"`
	P99Ms   *float64 `json:"p99_ms,omitempty"`
	// RTTs is p50 over the profile's client→executor round trip (the same
	// through the relay and direct): how many round trips a start costs.
	RTTs *float64 `json:"rtts,omitempty"`
	MBps *float64 `json:"mbps,omitempty"` // 10^6 bytes per second
	// Bytes is what a throughput or copy row moved (in its best run).
	Bytes int64 `json:"bytes,omitempty"`
	// RelayCPUPerGiB is the relay process's user+system CPU seconds per GiB
	// it forwarded (outpost-relay throughput and copy rows).
	RelayCPUPerGiB *float64 `json:"relay_cpu_s_per_gib,omitempty"`
	Errors         *int     `json:"errors,omitempty"`
	Note           string   `json:"note,omitempty"`
	Skipped        string   `json:"skipped,omitempty"`
}

// LinkInfo is one emulated link of a profile, with what its two pipes did
// while the profile ran (both directions added).
type LinkInfo struct {
	RTTMs      float64 `json:"rtt_ms"`
	RateMbps   float64 `json:"rate_mbps"` // 0: unlimited
	LossPct    float64 `json:"loss_pct"`  // each direction
	QueueBytes int     `json:"queue_bytes,omitempty"`
	Packets    uint64  `json:"packets"`
	Lost       uint64  `json:"lost"`
	Dropped    uint64  `json:"dropped"`
	Overflow   uint64  `json:"overflow"`
}

// ProfileInfo describes a profile as run.
type ProfileInfo struct {
	Name        string              `json:"name"`
	Description string              `json:"description"`
	PathRTTMs   float64             `json:"path_rtt_ms"`
	Links       map[string]LinkInfo `json:"links"`
	WallS       float64             `json:"wall_s"`
}

// Report is what -json writes.
type Report struct {
	Machine  string        `json:"machine"`
	Date     time.Time     `json:"date"`
	MTU      int           `json:"mtu"`
	Quick    bool          `json:"quick,omitempty"`
	Profiles []ProfileInfo `json:"profiles"`
	Results  []Result      `json:"results"`
}

func f64(v float64) *float64 { return &v }

// writeMarkdown prints one table per profile, calibration first.
func writeMarkdown(w io.Writer, rep Report) {
	fmt.Fprintf(w, "Machine: %s; %s; MTU %d%s\n", rep.Machine, rep.Date.Format("2006-01-02"), rep.MTU, map[bool]string{true: "; -quick"}[rep.Quick])
	num := func(p *float64, prec int) string {
		if p == nil {
			return ""
		}
		return fmt.Sprintf("%.*f", prec, *p)
	}
	profiles := []string{"calibration"}
	desc := map[string]string{"calibration": "one link, no delay, no rate limit, no loss: the delay line's own ceiling (-no-gso: MTU-sized packets only, as on lossy links)"}
	for _, p := range rep.Profiles {
		profiles = append(profiles, p.Name)
		desc[p.Name] = p.Description
	}
	for _, name := range profiles {
		var rows []Result
		for _, r := range rep.Results {
			if r.Profile == name {
				rows = append(rows, r)
			}
		}
		if len(rows) == 0 {
			continue
		}
		fmt.Fprintf(w, "\n**%s** — %s\n\n", name, desc[name])
		fmt.Fprintln(w, "| metric | target | runs | p50 ms | p99 ms | RTTs | MB/s | relay CPU-s/GiB | other |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|---|---|---|")
		for _, r := range rows {
			var other []string
			if r.Bytes > 0 {
				other = append(other, fmt.Sprintf("%.0f MB", float64(r.Bytes)/1e6))
			}
			if r.Errors != nil {
				other = append(other, fmt.Sprintf("%d errors", *r.Errors))
			}
			if r.Note != "" {
				other = append(other, r.Note)
			}
			if r.Skipped != "" {
				other = append(other, "skipped: "+r.Skipped)
			}
			runs := ""
			if r.Runs > 0 {
				runs = fmt.Sprint(r.Runs)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", r.Metric, r.Target, runs,
				num(r.P50Ms, 1), num(r.P99Ms, 1), num(r.RTTs, 2), num(r.MBps, 1), num(r.RelayCPUPerGiB, 2),
				strings.ReplaceAll(strings.Join(other, "; "), "|", "/"))
		}
	}
	for _, p := range rep.Profiles {
		var links []string
		for _, name := range []string{"cli-rly", "rly-exe", "cli-exe"} {
			if l, ok := p.Links[name]; ok {
				links = append(links, fmt.Sprintf("%s %d pkts, %d lost, %d dropped, %d overflow", name, l.Packets, l.Lost, l.Dropped, l.Overflow))
			}
		}
		fmt.Fprintf(w, "\n%s (%.0f s): %s", p.Name, p.WallS, strings.Join(links, "; "))
	}
	fmt.Fprintln(w)
}
