package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
)

func (h *harness) add(r Result) { h.results = append(h.results, r) }

func (h *harness) skip(p, metric, target, why string) {
	h.add(Result{Profile: p, Metric: metric, Target: target, Skipped: why})
}

// runs scales a run count down under -quick.
func runs(n int) int {
	if *quick {
		return max(n/2, 3)
	}
	return n
}

func (h *harness) runMetric(ctx context.Context, p profile, m string) {
	switch m {
	case "rtt":
		h.rtt(ctx, p)
	case "cold_start":
		h.coldStart(ctx, p)
	case "warm_start":
		h.warmStart(ctx, p)
	case "throughput":
		h.throughput(ctx, p)
	case "copy_up", "copy_down":
		h.copyFile(ctx, p, m)
	case "exactly_once":
		h.exactlyOnce(ctx, p)
	}
}

// The outpost clients' argv, through the relay and direct.
func (h *harness) outpostExec(target string, argv ...string) []string {
	if target == "outpost-relay" {
		return append([]string{h.bin, "exec", "--relay", h.relayURLCli, "--executor", executorID, "--token", h.clientToken, "--cwd", "/tmp", "--"}, argv...)
	}
	return append([]string{h.bin, "exec", "--target", h.directURL, "--cwd", "/tmp", "--"}, argv...)
}

// runIn runs argv in the client's namespace to completion; the error
// carries the tail of its output. The wall time includes the process's
// own start, as a user's command would.
func (h *harness) runIn(ctx context.Context, argv []string) (time.Duration, error) {
	cmd := command(ctx, h.env, argv...)
	out := peers.NewTailBuffer(4 << 10)
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	if err := h.ns["cli"].Start(cmd); err != nil {
		return 0, err
	}
	err := cmd.Wait()
	d := time.Since(t0)
	if err != nil {
		return d, fmt.Errorf("%s: %v: %s", filepath.Base(argv[0]), err, lastLines(out.String(), 2))
	}
	return d, nil
}

// timed records p50/p99 of n runs of f after one untimed warm-up (which
// pays for first contact: keys, pins, the relay's token check cache).
func (h *harness) timed(ctx context.Context, p profile, metric, target string, n int, f func() (time.Duration, error)) {
	if _, err := f(); err != nil {
		h.skip(p.name, metric, target, err.Error())
		return
	}
	var d []time.Duration
	for range n {
		if ctx.Err() != nil {
			return
		}
		t, err := f()
		if err != nil {
			h.skip(p.name, metric, target, err.Error())
			return
		}
		d = append(d, t)
	}
	h.addTimes(p, metric, target, d)
}

func (h *harness) addTimes(p profile, metric, target string, d []time.Duration) {
	p50, p99 := peers.Percentiles(d)
	h.add(Result{Profile: p.name, Metric: metric, Target: target, Runs: len(d), P50Ms: f64(p50), P99Ms: f64(p99), RTTs: f64(p50 / ms(p.pathRTT))})
}

// rtt times a one-byte TCP ping-pong over each link.
func (h *harness) rtt(ctx context.Context, p profile) {
	for _, l := range []struct{ link, from, to string }{
		{"cli-rly", "cli", cliRlyRly}, {"rly-exe", "rly", rlyExeExe}, {"cli-exe", "cli", cliExeExe},
	} {
		c, err := h.dial(ctx, l.from, l.to+tcpEcho)
		if err != nil {
			h.skip(p.name, "rtt", l.link, err.Error())
			continue
		}
		c.SetDeadline(time.Now().Add(30 * time.Second))
		var d []time.Duration
		buf := []byte{1}
		for range runs(10) {
			t0 := time.Now()
			if _, err = c.Write(buf); err == nil {
				_, err = io.ReadFull(c, buf)
			}
			if err != nil {
				break
			}
			d = append(d, time.Since(t0))
		}
		c.Close()
		if err != nil {
			h.skip(p.name, "rtt", l.link, err.Error())
			continue
		}
		want := ms(2 * p.links[l.link].Delay)
		p50, p99 := peers.Percentiles(d)
		h.add(Result{Profile: p.name, Metric: "rtt", Target: l.link, Runs: len(d), P50Ms: f64(p50), P99Ms: f64(p99),
			Note: fmt.Sprintf("configured %.0f ms (+%.2f ms)", want, p50-want)})
	}
}

// dial connects from a namespace.
func (h *harness) dial(ctx context.Context, from, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.ns[from].Do(func() (err error) {
		c, err = (&net.Dialer{Timeout: 20 * time.Second}).DialContext(ctx, "tcp", addr)
		return
	})
	return c, err
}

func (h *harness) coldStart(ctx context.Context, p profile) {
	n := runs(8)
	for _, target := range []string{"outpost-relay", "outpost-direct"} {
		argv := h.outpostExec(target, "true")
		h.timed(ctx, p, "cold_start", target, n, func() (time.Duration, error) { return h.runIn(ctx, argv) })
	}
	if h.ssh == nil {
		h.skip(p.name, "cold_start", "ssh", h.sshErr.Error())
		h.skip(p.name, "cold_start", "ssh-controlmaster", h.sshErr.Error())
		return
	}
	h.timed(ctx, p, "cold_start", "ssh", n, func() (time.Duration, error) { return h.runIn(ctx, h.ssh.argv(false, "true")) })
	h.timed(ctx, p, "cold_start", "ssh-controlmaster", n, func() (time.Duration, error) { return h.runIn(ctx, h.ssh.argv(true, "true")) })
}

// warmStart runs the helper in the client's namespace: one connection,
// then timed starts of /bin/true to its exit.
func (h *harness) warmStart(ctx context.Context, p profile) {
	self, err := os.Executable()
	if err != nil {
		h.skip(p.name, "warm_start", "outpost-relay", err.Error())
		return
	}
	for _, target := range []string{"outpost-relay", "outpost-direct"} {
		argv := []string{self, "-helper", "warm", "-helper-n", strconv.Itoa(runs(20)), "-helper-known", filepath.Join(h.dir, "known_executors_warm")}
		if target == "outpost-relay" {
			argv = append(argv, "-helper-url", h.relayURLCli, "-helper-executor", executorID)
		} else {
			argv = append(argv, "-helper-url", h.directURL)
		}
		cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		cmd := command(cctx, append(h.env, "WAN_HELPER_TOKEN="+h.clientToken), argv...)
		var out bytes.Buffer
		errb := peers.NewTailBuffer(4 << 10)
		cmd.Stdout, cmd.Stderr = &limitWriter{w: &out, n: 1 << 20}, errb
		err := h.ns["cli"].Start(cmd)
		if err == nil {
			err = cmd.Wait()
		}
		cancel()
		var res warmResult
		if err == nil {
			err = json.Unmarshal(out.Bytes(), &res)
		}
		if err != nil {
			h.skip(p.name, "warm_start", target, fmt.Sprintf("helper: %v: %s", err, lastLines(errb.String(), 2)))
			continue
		}
		d := make([]time.Duration, len(res.Ms))
		for i, v := range res.Ms {
			d[i] = time.Duration(v * float64(time.Millisecond))
		}
		h.addTimes(p, "warm_start", target, d)
	}
}

// streamResult is one single-stream transfer.
type streamResult struct {
	bytes int64
	// rate is from the first byte to the last: connection setup and the
	// command's start excluded, TCP's slow start included.
	mbps float64
	note string
}

// readStream reads r until EOF, want bytes, or limit after the first
// byte (then it calls stop, which must unblock the read).
func readStream(r io.Reader, want int64, limit time.Duration, stop func()) (streamResult, error) {
	buf := make([]byte, 256<<10)
	var total, first int64
	var t1, tLast time.Time
	var capped atomic.Bool
	for total < want {
		n, err := r.Read(buf)
		now := time.Now()
		if n > 0 {
			if total == 0 {
				t1, first = now, int64(n)
				time.AfterFunc(limit, func() { capped.Store(true); stop() })
			}
			total += int64(n)
			tLast = now
		}
		if err != nil {
			if capped.Load() || err == io.EOF {
				break
			}
			return streamResult{bytes: total}, err
		}
	}
	res := streamResult{bytes: total}
	if total > first && tLast.After(t1) {
		res.mbps = float64(total-first) / tLast.Sub(t1).Seconds() / 1e6
	}
	if capped.Load() {
		res.note = fmt.Sprintf("stopped after %v", limit)
	} else if total < want {
		return res, fmt.Errorf("stream ended after %d of %d bytes", total, want)
	}
	return res, nil
}

// streamCmd runs argv in the client's namespace and reads its stdout.
func (h *harness) streamCmd(ctx context.Context, argv []string, want int64, limit time.Duration) (streamResult, error) {
	cctx, cancel := context.WithTimeout(ctx, limit+60*time.Second)
	defer cancel()
	cmd := command(cctx, h.env, argv...)
	errb := peers.NewTailBuffer(4 << 10)
	cmd.Stderr = errb
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return streamResult{}, err
	}
	if err := h.ns["cli"].Start(cmd); err != nil {
		return streamResult{}, err
	}
	res, err := readStream(stdout, want, limit, cancel)
	werr := cmd.Wait()
	if err == nil && res.note == "" && werr != nil {
		err = fmt.Errorf("%v: %s", werr, lastLines(errb.String(), 2))
	}
	if err != nil {
		return res, fmt.Errorf("%v: %s", err, lastLines(errb.String(), 2))
	}
	return res, nil
}

// streamTCP reads want bytes from the plain TCP source.
func (h *harness) streamTCP(ctx context.Context, from, addr string, want int64, limit time.Duration) (streamResult, error) {
	c, err := h.dial(ctx, from, addr)
	if err != nil {
		return streamResult{}, err
	}
	defer c.Close()
	var req [8]byte
	binary.BigEndian.PutUint64(req[:], uint64(want))
	if _, err := c.Write(req[:]); err != nil {
		return streamResult{}, err
	}
	c.SetReadDeadline(time.Now().Add(limit + 60*time.Second))
	return readStream(c, want, limit, func() { c.SetReadDeadline(time.Now()) })
}

// relayCPU measures the relay's CPU seconds around f.
func (h *harness) relayCPU(f func() (int64, error)) (int64, *float64, error) {
	before, err1 := cpuSeconds(h.relay.pid())
	n, err := f()
	after, err2 := cpuSeconds(h.relay.pid())
	if err != nil || err1 != nil || err2 != nil || n <= 0 {
		return n, nil, err
	}
	return n, f64((after - before) / (float64(n) / (1 << 30))), nil
}

func (h *harness) throughput(ctx context.Context, p profile) {
	want := p.thrBytes
	if *quick {
		want = p.thrQuick
	}
	argv := []string{"head", "-c", strconv.FormatInt(want, 10), "/dev/zero"}
	row := func(target string, f func() (streamResult, error), relay bool) {
		if ctx.Err() != nil {
			return
		}
		var res streamResult
		var err error
		var cpu *float64
		if relay {
			_, cpu, err = h.relayCPU(func() (int64, error) { res, err = f(); return res.bytes, err })
		} else {
			res, err = f()
		}
		if err != nil {
			h.skip(p.name, "throughput", target, err.Error())
			return
		}
		h.add(Result{Profile: p.name, Metric: "throughput", Target: target, Runs: 1, MBps: f64(res.mbps), Bytes: res.bytes,
			RelayCPUPerGiB: cpu, Note: res.note})
	}
	row("tcp", func() (streamResult, error) { return h.streamTCP(ctx, "cli", cliExeExe+tcpSource, want, p.thrCap) }, false)
	row("outpost-direct", func() (streamResult, error) {
		return h.streamCmd(ctx, h.outpostExec("outpost-direct", argv...), want, p.thrCap)
	}, false)
	row("outpost-relay", func() (streamResult, error) {
		return h.streamCmd(ctx, h.outpostExec("outpost-relay", argv...), want, p.thrCap)
	}, true)
	if h.ssh == nil {
		h.skip(p.name, "throughput", "ssh", h.sshErr.Error())
		return
	}
	row("ssh", func() (streamResult, error) { return h.streamCmd(ctx, h.ssh.argv(false, argv...), want, p.thrCap) }, false)
}

// calibrate measures the delay line's own ceiling: plain TCP and outpost
// direct over cli-exe with no delay, rate limit or loss (the links start
// unshaped), with offload as configured and with MTU-sized packets only
// (as on a lossy link), and the packets per second the line carried.
func (h *harness) calibrate(ctx context.Context) {
	const p = "calibration"
	link := h.links["cli-exe"]
	modes := []bool{false}
	if *gso {
		modes = []bool{true, false}
	}
	for _, offload := range modes {
		suffix := ""
		if *gso {
			if err := link.SetGSO(offload); err != nil {
				h.skip(p, "delay_line", "tcp", err.Error())
				return
			}
			if !offload {
				suffix = "-no-gso"
			}
		}
		for _, target := range []string{"tcp", "outpost-direct"} {
			if ctx.Err() != nil {
				return
			}
			before := link.AB.Stats().Packets + link.BA.Stats().Packets
			t0 := time.Now()
			var res streamResult
			var err error
			if target == "tcp" {
				res, err = h.streamTCP(ctx, "cli", cliExeExe+tcpSource, 4<<30, 4*time.Second)
			} else {
				res, err = h.streamCmd(ctx, h.outpostExec("outpost-direct", "head", "-c", strconv.Itoa(2<<30), "/dev/zero"), 2<<30, 4*time.Second)
			}
			if err != nil {
				h.skip(p, "delay_line", target+suffix, err.Error())
				continue
			}
			pkts := link.AB.Stats().Packets + link.BA.Stats().Packets - before
			kpps := float64(pkts) / time.Since(t0).Seconds() / 1e3
			h.add(Result{Profile: p, Metric: "delay_line", Target: target + suffix, Runs: 1, MBps: f64(res.mbps), Bytes: res.bytes,
				Note: fmt.Sprintf("%.0f k packets/s through the line, both directions, over the run", kpps)})
		}
	}
	if *gso {
		link.SetGSO(true)
	}
}

// makeFile writes size bytes of incompressible data.
func makeFile(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{7})
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := io.CopyN(w, rng, size); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func fileSHA(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	hh := sha256.New()
	if _, err := io.Copy(hh, f); err != nil {
		return "", err
	}
	return fmt.Sprintf("%x", hh.Sum(nil)), nil
}

// copyFile times one copy of a file up (client → executor) or down for
// outpost cp through the relay and direct, and scp. The namespaces share
// one file system, so "remote" and "local" are two paths in the work
// directory; every copy is checked with sha256 afterwards.
func (h *harness) copyFile(ctx context.Context, p profile, metric string) {
	size := p.copyBytes
	if *quick {
		size = p.copyQuick
	}
	if size == 0 {
		return
	}
	src := filepath.Join(h.dir, fmt.Sprintf("copy-src-%d.bin", size))
	if _, err := os.Stat(src); err != nil {
		if err := makeFile(src, size); err != nil {
			h.skip(p.name, metric, "outpost-relay", err.Error())
			return
		}
	}
	want, err := fileSHA(src)
	if err != nil {
		h.skip(p.name, metric, "outpost-relay", err.Error())
		return
	}
	up := metric == "copy_up"
	for _, target := range []string{"outpost-relay", "outpost-direct", "scp"} {
		if ctx.Err() != nil {
			return
		}
		dst := filepath.Join(h.dir, metric+"-"+target+".bin")
		os.Remove(dst)
		var argv []string
		remote := map[string]string{"outpost-relay": executorID + ":", "outpost-direct": ":", "scp": ":"}[target]
		from, to := src, remote+dst
		if !up {
			from, to = remote+src, dst
		}
		switch target {
		case "outpost-relay":
			argv = []string{h.bin, "cp", "-q", "--relay", h.relayURLCli, "--token", h.clientToken, from, to}
		case "outpost-direct":
			argv = []string{h.bin, "cp", "-q", "--target", h.directURL, from, to}
		case "scp":
			if h.ssh == nil {
				h.skip(p.name, metric, target, h.sshErr.Error())
				continue
			}
			argv = h.ssh.scpArgv(from, to)
		}
		cctx, cancel := context.WithTimeout(ctx, p.copyCap)
		var d time.Duration
		n, cpu, err := h.relayCPU(func() (int64, error) {
			var err error
			d, err = h.runIn(cctx, argv)
			return size, err
		})
		cancel()
		if cctx.Err() == context.DeadlineExceeded {
			err = fmt.Errorf("not done within %v", p.copyCap)
		}
		if err == nil {
			if got, herr := fileSHA(dst); herr != nil || got != want {
				err = fmt.Errorf("copy differs from the source (%v)", herr)
			}
		}
		os.Remove(dst)
		if err != nil {
			h.skip(p.name, metric, target, err.Error())
			continue
		}
		if target != "outpost-relay" {
			cpu = nil
		}
		h.add(Result{Profile: p.name, Metric: metric, Target: target, Runs: 1, MBps: f64(float64(n) / d.Seconds() / 1e6), Bytes: n,
			P50Ms: f64(ms(d)), RelayCPUPerGiB: cpu, Note: "wall time, connection setup included"})
	}
}

// exactlyOnceScript prints 6,000 numbered 100-byte lines in bursts of 500
// with 50 ms pauses, so the output streams over many round trips.
const exactlyOnceScript = `i=0; while [ $i -lt 6000 ]; do i=$((i+1)); printf 'line %06d %088d\n' $i 0; if [ $((i % 500)) -eq 0 ]; then sleep 0.05; fi; done`

const exactlyOnceLines = 6000

// checkLines counts what is wrong with the output: lines missing,
// duplicated, out of order, or garbled.
func checkLines(out []byte) (missing, dup, reordered, garbled int) {
	seen := make([]bool, exactlyOnceLines+1)
	last := 0
	for _, l := range strings.Split(strings.TrimSuffix(string(out), "\n"), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 || f[0] != "line" || len(l) != 100 {
			garbled++
			continue
		}
		n, err := strconv.Atoi(f[1])
		if err != nil || n < 1 || n > exactlyOnceLines {
			garbled++
			continue
		}
		if seen[n] {
			dup++
			continue
		}
		seen[n] = true
		if n < last {
			reordered++
		}
		last = n
	}
	for _, s := range seen[1:] {
		if !s {
			missing++
		}
	}
	return
}

func (h *harness) exactlyOnce(ctx context.Context, p profile) {
	for _, target := range []string{"outpost-relay", "outpost-direct", "ssh"} {
		if ctx.Err() != nil {
			return
		}
		var argv []string
		if target == "ssh" {
			if h.ssh == nil {
				h.skip(p.name, "exactly_once", target, h.sshErr.Error())
				continue
			}
			argv = h.ssh.argv(false, exactlyOnceScript) // ssh hands the remote shell one string
		} else {
			argv = h.outpostExec(target, "sh", "-c", exactlyOnceScript)
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		cmd := command(cctx, h.env, argv...)
		var out bytes.Buffer
		errb := peers.NewTailBuffer(4 << 10)
		cmd.Stdout, cmd.Stderr = &limitWriter{w: &out, n: 8 << 20}, errb
		t0 := time.Now()
		err := h.ns["cli"].Start(cmd)
		if err == nil {
			err = cmd.Wait()
		}
		d := time.Since(t0)
		cancel()
		if err != nil {
			h.skip(p.name, "exactly_once", target, fmt.Sprintf("%v: %s", err, lastLines(errb.String(), 2)))
			continue
		}
		missing, dup, reordered, garbled := checkLines(out.Bytes())
		bad := missing + dup + reordered + garbled
		note := fmt.Sprintf("%d lines exactly once, in order", exactlyOnceLines)
		if bad > 0 {
			note = fmt.Sprintf("%d missing, %d duplicated, %d reordered, %d garbled", missing, dup, reordered, garbled)
		}
		h.add(Result{Profile: p.name, Metric: "exactly_once", Target: target, Runs: 1, P50Ms: f64(ms(d)), Errors: &bad, Note: note})
	}
}

// limitWriter keeps the first n bytes and counts the rest away.
type limitWriter struct {
	w io.Writer
	n int64
}

func (l *limitWriter) Write(p []byte) (int, error) {
	if l.n > 0 {
		k := min(int64(len(p)), l.n)
		l.w.Write(p[:k])
		l.n -= k
	}
	return len(p), nil
}

// serveSource answers each connection's 8-byte big-endian length with that
// many zero bytes (at most 64 GiB), then closes it.
func serveSource(ln net.Listener) {
	zeros := make([]byte, 256<<10)
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			var req [8]byte
			c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadFull(c, req[:]); err != nil {
				return
			}
			n := min(binary.BigEndian.Uint64(req[:]), 64<<30)
			for n > 0 {
				k := min(n, uint64(len(zeros)))
				if _, err := c.Write(zeros[:k]); err != nil {
					return
				}
				n -= k
			}
		}()
	}
}

// serveEcho echoes each connection back to itself.
func serveEcho(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			io.Copy(c, c)
		}()
	}
}
