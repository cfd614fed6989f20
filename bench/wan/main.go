// Command wan measures outpost against ssh, scp and plain TCP over emulated
// wide-area links, on one machine, in one run. It builds three network
// namespaces — client (cli), relay (rly) and executor (exe; sshd and a
// plain-TCP source live there too) — joined by three point-to-point links
// (cli-rly, rly-exe, cli-exe), each a pair of TUN devices with this
// process in between as a user-space delay line (package netem: one-way
// delay, rate limit behind a drop-tail queue, random loss). Then for each
// profile (regional, intercontinental, lossy; 40ms and 160ms on request)
// it reshapes the links and measures:
//
//   - rtt: a TCP ping-pong over each link, against the configured RTT.
//   - cold_start: `outpost exec -- true` as a fresh process, through the
//     relay and direct; ssh fresh, and over a ControlMaster — wall time and
//     the same in round trips of the client→executor path.
//   - warm_start: process/start of /bin/true to its exit on an open
//     connection (a helper process with the client library), in RTTs.
//   - throughput: one stream of zeros to stdout (`head -c N /dev/zero`)
//     through the relay, direct, over ssh, and plain TCP; from the first
//     byte to the last (setup excluded), with the relay's CPU per GiB.
//   - copy_up, copy_down: `outpost cp` of a file through the relay and
//     direct against scp.
//   - exactly_once: a command printing 6,000 numbered lines in bursts,
//     checked for loss, duplication and reordering.
//
// First it measures the delay line's own ceiling (calibration: plain TCP
// and outpost direct over one link with no delay, rate limit or loss).
// A Markdown table goes to stdout, JSON to -json FILE. Run it as root:
//
//	go run ./bench/wan [-profiles regional,intercontinental,lossy|all] [-quick] [-only METRIC,…] [-json FILE]
//
// Everything it creates (namespaces owan-PID-*, their TUNs and processes)
// is removed at the end, on failure and on SIGINT/SIGTERM; a run that was
// killed outright leaves namespaces that the next run removes first.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/outpost-exec/outpost/bench/wan/netem"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
)

var (
	profilesFlag = flag.String("profiles", defaultProfiles, "profiles to run, comma-separated: regional, intercontinental, lossy, 40ms, 160ms, or all")
	quick        = flag.Bool("quick", false, "fewer runs and smaller transfers (about a third of the time)")
	only         = flag.String("only", "", "run only these metrics (comma-separated: "+strings.Join(allMetrics, ", ")+")")
	jsonOut      = flag.String("json", "", "also write the results as JSON to this file")
	mtu          = flag.Int("mtu", 1500, "MTU of every emulated link")
	noInstall    = flag.Bool("no-install", false, "do not apt-get install a missing openssh-server/openssh-client")
	gso          = flag.Bool("gso", true, "TCP segmentation offload on the TUNs (lossless links only): segments cross the delay line in bursts of up to 64 KiB, lifting its ceiling")
	noCalibrate  = flag.Bool("no-calibrate", false, "skip the delay line's own ceiling (calibration rows)")
	helperMode   = flag.String("helper", "", "internal: run as a helper inside a namespace (warm)")
)

// nsPrefix names every namespace this harness makes: owan-PID-role; and
// dirPrefix its work directory in $TMPDIR: outpost-wan-PID-random.
const (
	nsPrefix  = "owan-"
	dirPrefix = "outpost-wan-"
)

// removeStaleDirs removes the work directories (binaries, copies of up to
// 128 MiB) of runs that were killed before they could.
func removeStaleDirs() {
	entries, _ := os.ReadDir(os.TempDir())
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), dirPrefix)
		if !ok || !e.IsDir() {
			continue
		}
		pidStr, _, ok := strings.Cut(rest, "-")
		pid, err := strconv.Atoi(pidStr)
		if !ok || err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if procgroup.Alive(pid) {
			continue // still running (or the pid was reused: leave it)
		}
		if os.RemoveAll(filepath.Join(os.TempDir(), e.Name())) == nil {
			progress("removed a killed run's work directory %s", e.Name())
		}
	}
}

func main() {
	flag.Parse()
	if *helperMode != "" {
		if err := runHelper(*helperMode); err != nil {
			fmt.Fprintln(os.Stderr, "wan helper:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	go func() {
		<-ctx.Done()
		stop() // a second signal kills at once; the next run removes what is left
	}()
	if err := run(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "bench/wan:", err)
		os.Exit(1)
	}
}

func progress(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "wan: "+format+"\n", args...)
}

// harness is the running topology and its servers.
type harness struct {
	dir, bin string
	env      []string // every outpost process's XDG directories, below dir

	ns    map[string]*netem.NS // cli, rly, exe
	links map[string]*netem.Link

	relay, joined, direct *proc
	relayURLCli           string // as the client reaches it (cli-rly)
	directURL             string
	clientToken           string
	ssh                   *sshPeer
	sshErr                error
	listeners             []net.Listener

	results []Result

	cleanupOnce sync.Once
}

// The addresses: link n is 10.77.n.0/30, its A side .1 and B side .2.
const (
	cliRlyCli  = "10.77.1.1"
	cliRlyRly  = "10.77.1.2"
	rlyExeRly  = "10.77.2.1"
	rlyExeExe  = "10.77.2.2"
	cliExeCli  = "10.77.3.1"
	cliExeExe  = "10.77.3.2"
	executorID = "wan"
	tcpSource  = ":5001" // plain TCP: 8-byte length in, that many zero bytes out
	tcpEcho    = ":5002" // plain TCP echo, for rtt
)

func run(ctx context.Context) error {
	profs, err := pickProfiles(*profilesFlag)
	if err != nil {
		return err
	}
	metrics, err := pickMetrics(*only)
	if err != nil {
		return err
	}
	if *mtu < 576 || *mtu > 65535 {
		return fmt.Errorf("-mtu %d is outside [576, 65535]", *mtu)
	}
	if err := netem.Available(); err != nil {
		return fmt.Errorf("the WAN harness %v", err)
	}
	if removed, err := netem.RemoveStale(nsPrefix); err != nil {
		return fmt.Errorf("removing a killed run's namespaces: %w", err)
	} else if len(removed) > 0 {
		progress("removed stale namespaces of a killed run: %s", strings.Join(removed, " "))
	}
	installSSH()

	removeStaleDirs()
	dir, err := os.MkdirTemp("", fmt.Sprintf("%s%d-", dirPrefix, os.Getpid()))
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	h := &harness{dir: dir, ns: map[string]*netem.NS{}, links: map[string]*netem.Link{},
		env: []string{"XDG_CONFIG_HOME=" + filepath.Join(dir, "config"), "XDG_STATE_HOME=" + filepath.Join(dir, "state"), "OUTPOST_RELAY=", "OUTPOST_TARGET=", "OUTPOST_TOKEN="}}
	defer h.cleanup()
	progress("building outpost")
	if h.bin, err = peers.BuildOutpost(dir); err != nil {
		return err
	}
	progress("building namespaces and links (MTU %d)", *mtu)
	if err := h.build(); err != nil {
		return err
	}
	progress("starting relay, executors, sshd")
	if err := h.startServices(ctx); err != nil {
		return err
	}

	rep := Report{Machine: peers.Machine(), Date: time.Now().UTC(), MTU: *mtu, Quick: *quick}
	if !*noCalibrate {
		progress("calibration: the delay line's ceiling")
		h.calibrate(ctx)
	}
	for _, p := range profs {
		if ctx.Err() != nil {
			break
		}
		t0 := time.Now()
		progress("profile %s: %s", p.name, p.desc)
		if err := h.setProfile(p); err != nil {
			return err
		}
		before := h.linkStats()
		for _, m := range metrics {
			if ctx.Err() != nil {
				break
			}
			if p.metrics != nil && !slices.Contains(p.metrics, m) {
				continue
			}
			progress("  %s", m)
			h.runMetric(ctx, p, m)
		}
		info := ProfileInfo{Name: p.name, Description: p.desc, PathRTTMs: ms(p.pathRTT), Links: map[string]LinkInfo{}, WallS: time.Since(t0).Seconds()}
		after := h.linkStats()
		for _, name := range linkNames {
			c := p.links[name]
			a, b := after[name], before[name]
			info.Links[name] = LinkInfo{RTTMs: ms(2 * c.Delay), RateMbps: c.Rate / 1e6, LossPct: c.Loss * 100, QueueBytes: c.Queue,
				Packets: a.Packets - b.Packets, Lost: a.Lost - b.Lost, Dropped: a.Dropped - b.Dropped, Overflow: a.Overflow - b.Overflow}
		}
		rep.Profiles = append(rep.Profiles, info)
	}
	if ctx.Err() != nil {
		return errors.New("interrupted; everything it started is being removed")
	}
	rep.Results = h.results
	writeMarkdown(os.Stdout, rep)
	if *jsonOut != "" {
		data, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.MkdirAll(filepath.Dir(*jsonOut), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(*jsonOut, append(data, '\n'), 0o644); err != nil {
			return err
		}
	}
	return nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// installSSH installs openssh-server and -client when missing (as make
// bench does); failing that, the ssh rows are skipped with the reason.
func installSSH() {
	var missing []string
	if _, err := exec.LookPath("ssh"); err != nil {
		missing = append(missing, "openssh-client")
	}
	if _, err := os.Stat("/usr/sbin/sshd"); err != nil {
		missing = append(missing, "openssh-server")
	}
	if len(missing) == 0 || *noInstall {
		return
	}
	progress("installing %s", strings.Join(missing, " "))
	for _, args := range [][]string{{"update", "-qq"}, append([]string{"install", "-y", "-qq", "--no-install-recommends"}, missing...)} {
		cmd := exec.Command("apt-get", args...)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		if out, err := cmd.CombinedOutput(); err != nil {
			progress("apt-get %s failed: %v: %s", args[0], err, lastLines(string(out), 3))
			return
		}
	}
}

// build makes the namespaces and links, all unshaped until setProfile.
func (h *harness) build() error {
	pfx := fmt.Sprintf("%s%d-", nsPrefix, os.Getpid())
	for _, role := range []string{"cli", "rly", "exe"} {
		ns, err := netem.CreateNS(pfx + role)
		if err != nil {
			return err
		}
		h.ns[role] = ns
	}
	type end struct{ role, dev, addr string }
	for i, l := range []struct {
		name string
		a, b end
	}{
		{"cli-rly", end{"cli", "to-rly", cliRlyCli}, end{"rly", "to-cli", cliRlyRly}},
		{"rly-exe", end{"rly", "to-exe", rlyExeRly}, end{"exe", "to-rly", rlyExeExe}},
		{"cli-exe", end{"cli", "to-exe", cliExeCli}, end{"exe", "to-cli", cliExeExe}},
	} {
		link, err := netem.NewLink(l.name, netem.Side{NS: h.ns[l.a.role], Dev: l.a.dev, Addr: l.a.addr + "/30"},
			netem.Side{NS: h.ns[l.b.role], Dev: l.b.dev, Addr: l.b.addr + "/30"}, *mtu, *gso, netem.Config{}, uint64(i*2+1))
		if err != nil {
			return err
		}
		h.links[l.name] = link
	}
	return nil
}

func (h *harness) setProfile(p profile) error {
	for i, name := range linkNames {
		if err := h.links[name].Set(p.links[name], uint64(i*2+1)); err != nil {
			return err
		}
	}
	time.Sleep(200 * time.Millisecond) // let packets queued under the old settings leave
	return nil
}

func (h *harness) linkStats() map[string]netem.Stats {
	out := map[string]netem.Stats{}
	for name, l := range h.links {
		a, b := l.AB.Stats(), l.BA.Stats()
		out[name] = netem.Stats{Packets: a.Packets + b.Packets, Lost: a.Lost + b.Lost, Dropped: a.Dropped + b.Dropped, Overflow: a.Overflow + b.Overflow}
	}
	return out
}

// startServices starts the relay (rly), a joined and a serving executor
// and sshd (exe), the client's ssh ControlMaster (cli), and the plain TCP
// source and echo servers (in this process, sockets in exe and rly).
func (h *harness) startServices(ctx context.Context) error {
	relayState := filepath.Join(h.dir, "relay")
	var err error
	var line string
	if h.relay, line, err = startProc(ctx, h.ns["rly"], "relay", h.env, true, h.bin, "relay", "serve",
		"--listen", "tcp://0.0.0.0:7443", "--state-dir", relayState, "--log-level", "warn"); err != nil {
		return err
	}
	_, fp, ok := strings.Cut(line, "#")
	if !ok {
		return fmt.Errorf("relay printed %q, not outpost://HOST:PORT#fingerprint", line)
	}
	h.relayURLCli = "outpost://" + cliRlyRly + ":7443#" + fp
	token := func(args ...string) (string, error) { return peers.TokenEnv(ctx, h.bin, relayState, h.env, args...) }
	joinTok, err := token("--join", "--uses", "1")
	if err != nil {
		return err
	}
	if h.clientToken, err = token("--client", "--executors", executorID); err != nil {
		return err
	}
	if h.joined, _, err = startProc(ctx, h.ns["exe"], "executor join", h.env, false, h.bin, "executor", "join",
		"--relay", "outpost://"+rlyExeRly+":7443#"+fp, "--token", joinTok, "--id", executorID,
		"--state-dir", filepath.Join(h.dir, "joined"), "--log-level", "info"); err != nil {
		return err
	}
	if err := h.joined.waitStderr(ctx, "joined the relay", 30*time.Second); err != nil {
		return err
	}
	if h.direct, h.directURL, err = startProc(ctx, h.ns["exe"], "executor serve", h.env, true, h.bin, "executor", "serve",
		"--listen", "tcp://"+cliExeExe+":7000", "--state-dir", filepath.Join(h.dir, "direct"), "--log-level", "warn"); err != nil {
		return err
	}
	if !strings.HasPrefix(h.directURL, "tcp://") {
		return fmt.Errorf("executor serve printed %q, not its tcp:// URL", h.directURL)
	}
	if h.ssh, h.sshErr = startSSH(ctx, h.ns["exe"], filepath.Join(h.dir, "ssh"), cliExeExe); h.sshErr == nil {
		if h.sshErr = h.ssh.startMaster(ctx, h.ns["cli"]); h.sshErr != nil {
			h.ssh.stop()
			h.ssh = nil
		}
	}
	if h.sshErr != nil {
		progress("ssh rows will be skipped: %v", h.sshErr)
	}
	for _, l := range []struct{ ns, addr string }{{"exe", tcpSource}, {"exe", tcpEcho}, {"rly", tcpEcho}} {
		var ln net.Listener
		if err := h.ns[l.ns].Do(func() (err error) { ln, err = net.Listen("tcp", l.addr); return }); err != nil {
			return err
		}
		h.listeners = append(h.listeners, ln)
		if l.addr == tcpSource {
			go serveSource(ln)
		} else {
			go serveEcho(ln)
		}
	}
	return nil
}

// cleanup stops every process, closes every link (removing the TUNs) and
// deletes the namespaces, killing whatever still runs in them.
func (h *harness) cleanup() {
	h.cleanupOnce.Do(func() {
		h.ssh.stop()
		for _, p := range []*proc{h.direct, h.joined, h.relay} {
			p.stop()
		}
		for _, ln := range h.listeners {
			ln.Close()
		}
		for _, l := range h.links {
			l.Close()
		}
		for _, ns := range h.ns {
			if err := ns.Delete(); err != nil {
				fmt.Fprintln(os.Stderr, "wan: cleanup:", err)
			}
		}
	})
}
