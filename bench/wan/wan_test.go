package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"
)

func TestCheckLines(t *testing.T) {
	var good bytes.Buffer
	for i := 1; i <= exactlyOnceLines; i++ {
		fmt.Fprintf(&good, "line %06d %088d\n", i, 0)
	}
	if m, d, r, g := checkLines(good.Bytes()); m+d+r+g != 0 {
		t.Fatalf("clean output: %d missing, %d dup, %d reordered, %d garbled", m, d, r, g)
	}
	lines := strings.SplitAfter(good.String(), "\n")
	lines = lines[:len(lines)-1]
	// Drop line 10, duplicate line 20, swap 30 and 31, garble 40.
	bad := append([]string(nil), lines[:9]...)
	bad = append(bad, lines[10:20]...)
	bad = append(bad, lines[19])
	bad = append(bad, lines[20:29]...)
	bad = append(bad, lines[30], lines[29])
	bad = append(bad, lines[31:39]...)
	bad = append(bad, "line 000040 garbage\n")
	bad = append(bad, lines[40:]...)
	m, d, r, g := checkLines([]byte(strings.Join(bad, "")))
	// Line 40 garbled also counts as missing.
	if m != 2 || d != 1 || r != 1 || g != 1 {
		t.Fatalf("got %d missing, %d dup, %d reordered, %d garbled; want 2, 1, 1, 1", m, d, r, g)
	}
}

func TestExactlyOnceScriptLineLength(t *testing.T) {
	// The checker insists on 100-character lines: the script's printf
	// must make exactly that.
	if got := len(fmt.Sprintf("line %06d %088d", 6000, 0)); got != 100 {
		t.Fatalf("line length %d", got)
	}
}

func TestPickProfiles(t *testing.T) {
	ps, err := pickProfiles(defaultProfiles)
	if err != nil || len(ps) != 3 {
		t.Fatalf("default profiles: %v, %v", ps, err)
	}
	if _, err := pickProfiles("regional,nowhere"); err == nil {
		t.Fatal("unknown profile accepted")
	}
	if _, err := pickProfiles(" , "); err == nil {
		t.Fatal("empty list accepted")
	}
	if all, _ := pickProfiles("all"); len(all) != len(profiles) {
		t.Fatal("all is not every profile")
	}
	if _, err := pickMetrics("throughput,bogus"); err == nil {
		t.Fatal("unknown metric accepted")
	}
	// Every profile's two paths have the same round trip.
	for _, p := range profiles {
		relay := p.links["cli-rly"].Delay + p.links["rly-exe"].Delay
		if 2*relay != p.pathRTT || 2*p.links["cli-exe"].Delay != p.pathRTT {
			t.Errorf("%s: relay path %v, direct %v, path RTT %v", p.name, 2*relay, 2*p.links["cli-exe"].Delay, p.pathRTT)
		}
	}
}

// slowReader returns n bytes per read, sleeping d before each.
type slowReader struct {
	n     int
	d     time.Duration
	total int
	stop  chan struct{}
}

func (r *slowReader) Read(b []byte) (int, error) {
	select {
	case <-r.stop:
		return 0, errors.New("stopped")
	case <-time.After(r.d):
	}
	r.total += r.n
	return min(r.n, len(b)), nil
}

func TestReadStream(t *testing.T) {
	res, err := readStream(io.LimitReader(bytes.NewReader(make([]byte, 10<<20)), 10<<20), 10<<20, time.Minute, func() {})
	if err != nil || res.bytes != 10<<20 || res.mbps <= 0 || res.note != "" {
		t.Fatalf("whole stream: %+v, %v", res, err)
	}
	if _, err := readStream(bytes.NewReader(make([]byte, 100)), 1000, time.Minute, func() {}); err == nil {
		t.Fatal("a short stream passed")
	}
	// A stream slower than the limit is stopped and reported as such.
	r := &slowReader{n: 1000, d: 5 * time.Millisecond, stop: make(chan struct{})}
	res, err = readStream(r, 1<<40, 100*time.Millisecond, func() { close(r.stop) })
	if err != nil || !strings.Contains(res.note, "stopped") || res.bytes == 0 {
		t.Fatalf("capped stream: %+v, %v", res, err)
	}
}
