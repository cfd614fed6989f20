//go:build e2e

// The relay cluster end to end (e2e/cluster-compose.yml): three relays
// sharing one cluster key and keeping their state in a 3-node etcd
// cluster, two executors each joined to two of them, and a client that
// reaches the executors only through the relays. Each subtest of
// TestCluster brings up a stack of its own and breaks it one way: a relay
// killed while a command streams through it, the etcd leader killed, a
// relay cut off from etcd, and a single-use token redeemed by 100 clients
// at once.

package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

const (
	etcdImage     = "outpost-etcd:e2e"
	clusterFile   = "cluster-compose.yml"
	clusterStore  = "etcd://etcd1:2379,etcd2:2379,etcd3:2379/outpost"
	etcdEndpoints = "etcd1:2379,etcd2:2379,etcd3:2379"
	// outpost's exit statuses (cmd/outpost/exitcodes.go).
	codeRefused   = 118
	codeTransport = 121
)

var (
	clusterRelays    = []string{"relay1", "relay2", "relay3"}
	clusterExecutors = []string{"exec1", "exec2"}
)

func TestCluster(t *testing.T) {
	if _, err := exec.LookPath("docker-compose"); err != nil {
		testdeps.Missing(t, "docker", "docker-compose is not installed")
	}
	if out, err := run(t, "", nil, "docker", "info"); err != nil {
		testdeps.Missing(t, "docker", "no Docker engine: %s", out)
	}
	for _, b := range []string{"etcd", "etcdctl", "ldd"} {
		if _, err := exec.LookPath(b); err != nil {
			testdeps.Missing(t, "etcd", "%s is not installed (apt-get install etcd-server etcd-client)", b)
		}
	}
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	t.Cleanup(func() { run(t, "", nil, "docker", "rmi", "-f", image, etcdImage) })
	buildImage(t, root, image)
	buildEtcdImage(t, etcdImage)
	t.Logf("images %s and %s built in %v", image, etcdImage, since(start))

	t.Run("RelayKilledMidStream", func(t *testing.T) { testRelayKilledMidStream(t, root) })
	t.Run("EtcdLeaderKilled", func(t *testing.T) { testEtcdLeaderKilled(t, root) })
	t.Run("RelayPartitionedFromEtcd", func(t *testing.T) { testRelayPartitionedFromEtcd(t, root) })
	t.Run("ConcurrentRedemptionsOfASingleUseToken", func(t *testing.T) { testConcurrentRedemptions(t, root) })
}

// buildEtcdImage builds a FROM-scratch image of this machine's etcd and
// etcdctl (Debian's are dynamically linked): the two binaries, the shared
// libraries ldd names and the loader, at the paths ldd gives.
func buildEtcdImage(t *testing.T, tag string) {
	t.Helper()
	ctxDir := t.TempDir()
	rootfs := filepath.Join(ctxDir, "rootfs")
	for _, d := range []string{"usr/bin", "tmp", "var/lib/etcd"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(rootfs, "tmp"), 0o1777)
	libs := map[string]bool{}
	for _, bin := range []string{"etcd", "etcdctl"} {
		path, _ := exec.LookPath(bin)
		copyExecutable(t, path, filepath.Join(rootfs, "usr/bin", bin))
		out, err := exec.Command("ldd", path).CombinedOutput()
		if err != nil {
			if strings.Contains(string(out), "not a dynamic executable") {
				continue // static: nothing to add
			}
			t.Fatalf("ldd %s: %v\n%s", path, err, out)
		}
		// "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x…)",
		// "/lib64/ld-linux-x86-64.so.2 (0x…)"; linux-vdso has no file.
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "not found") {
				t.Fatalf("ldd %s: %s", path, line)
			}
			for _, f := range strings.Fields(line) {
				if strings.HasPrefix(f, "/") {
					libs[f] = true
					break
				}
			}
		}
	}
	for lib := range libs {
		copyExecutable(t, lib, filepath.Join(rootfs, lib))
	}
	dockerfile := "FROM scratch\nCOPY rootfs/ /\nENV PATH=/usr/bin\nENTRYPOINT [\"/usr/bin/etcd\"]\n"
	if err := os.WriteFile(filepath.Join(ctxDir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := run(t, "", nil, "docker", "build", "-q", "-t", tag, ctxDir); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
}

// copyExecutable copies src's content (through symlinks) to dst, 0755.
func copyExecutable(t *testing.T, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func since(t time.Time) time.Duration { return time.Since(t).Round(100 * time.Millisecond) }

// cluster is one compose project of cluster-compose.yml.
type cluster struct {
	t       *testing.T
	dir     string
	env     []string
	project string
	fp      string // the cluster key's fingerprint
	ids     map[string]string
}

// newCluster prepares the relays' shared state (the cluster key, with
// `outpost relay init`) and registers the stack's removal; start brings
// it up.
func newCluster(t *testing.T, root string) *cluster {
	t.Helper()
	state := t.TempDir()
	os.Chmod(state, 0o777)
	c := &cluster{
		t:       t,
		dir:     filepath.Join(root, "e2e"),
		project: fmt.Sprintf("outpost-cluster-%d", time.Now().UnixNano()%1e6),
		ids:     map[string]string{},
	}
	// Until they are made, the tokens are placeholders (the services
	// that use them are not created before).
	c.env = []string{
		"COMPOSE_PROJECT_NAME=" + c.project,
		"OUTPOST_CLUSTER_STATE=" + state,
		"OUTPOST_STORE=" + clusterStore,
		"OUTPOST_RELAY_FP=-",
		"OUTPOST_JOIN_TOKEN_1=-",
		"OUTPOST_JOIN_TOKEN_2=-",
		"OUTPOST_CLIENT_TOKEN=-",
	}
	t.Cleanup(func() {
		if t.Failed() {
			for _, svc := range []string{"etcd1", "etcd2", "etcd3", "relay1", "relay2", "relay3", "exec1", "exec2"} {
				out, _ := c.compose("logs", "--no-color", "--tail", "150", svc)
				t.Logf("logs of %s:\n%s", svc, out)
			}
		}
		c.compose("down", "-v", "--remove-orphans", "-t", "3")
	})
	out, err := run(t, "", nil, "docker", "run", "--rm", "-v", state+":/state", image,
		"relay", "init", "--state-dir", "/state", "--advertise", "relay1:7443")
	m := regexp.MustCompile(`outpost://relay1:7443#([A-Za-z0-9_-]{43})`).FindStringSubmatch(out)
	if err != nil || m == nil {
		t.Fatalf("outpost relay init: %v\n%s", err, out)
	}
	c.fp = m[1]
	c.setEnv("OUTPOST_RELAY_FP", c.fp)
	return c
}

func (c *cluster) setEnv(k, v string) {
	for i, kv := range c.env {
		if strings.HasPrefix(kv, k+"=") {
			c.env[i] = k + "=" + v
			return
		}
	}
	c.env = append(c.env, k+"="+v)
}

func (c *cluster) compose(args ...string) (string, error) {
	return run(c.t, c.dir, c.env, "docker-compose", append([]string{"-f", clusterFile}, args...)...)
}

// id is the container of a service.
func (c *cluster) id(svc string) string {
	c.t.Helper()
	if id := c.ids[svc]; id != "" {
		return id
	}
	out, err := c.compose("ps", "-q", svc)
	id := strings.TrimSpace(out)
	if err != nil || id == "" {
		c.t.Fatalf("no container for %s: %v\n%s", svc, err, out)
	}
	c.ids[svc] = id
	return id
}

func (c *cluster) network(name string) string { return c.project + "_" + name }

// dexec runs args in svc's container (docker exec) and returns stdout,
// stderr and the exit status (-1 when docker itself failed to run it).
func (c *cluster) dexec(svc string, env []string, args ...string) (string, string, int) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dargs := []string{"exec"}
	for _, e := range env {
		dargs = append(dargs, "-e", e)
	}
	dargs = append(append(dargs, c.id(svc)), args...)
	cmd := exec.CommandContext(ctx, "docker", dargs...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return stdout.String(), stderr.String(), 0
	case errors.As(err, &ee) && ee.ExitCode() >= 0:
		return stdout.String(), stderr.String(), ee.ExitCode()
	}
	return stdout.String(), stderr.String() + err.Error(), -1
}

func (c *cluster) relayURL(relay string) string { return "outpost://" + relay + ":7443#" + c.fp }

// outpost runs outpost in the client container against relay ("relay" is
// whichever relay the client network's DNS names first), bounded by
// secs (busybox timeout; status 137 when it fires).
func (c *cluster) outpost(relay string, env []string, secs int, args ...string) (string, string, int) {
	c.t.Helper()
	env = append([]string{"OUTPOST_RELAY=" + c.relayURL(relay)}, env...)
	return c.dexec("client", env, append([]string{"timeout", "-s", "KILL", strconv.Itoa(secs), "outpost"}, args...)...)
}

// poll calls f until it reports done, at most for d; it fails the test
// with f's last word when the deadline passes, and returns how long it
// took.
func poll(t *testing.T, what string, d, every time.Duration, f func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, msg := f()
		if ok {
			return since(start)
		}
		if time.Since(start) > d {
			t.Fatalf("%s: not within %v: %s", what, d, msg)
		}
		time.Sleep(every)
	}
}

// tool runs outpost in a fresh container on the etcd network (tokens are
// made and listed in the etcd store).
func (c *cluster) tool(args ...string) (string, error) {
	return c.compose(append([]string{"run", "--rm", "-T", "tool"}, args...)...)
}

var tokenLine = regexp.MustCompile(`(?m)^(opt_\S+)\s*$`)
var tokenID = regexp.MustCompile(`token (\S+) \((?:client|join)\) created`)

// token makes a token in the etcd store; it returns the secret and id.
func (c *cluster) token(args ...string) (secret, id string) {
	c.t.Helper()
	out, err := c.tool(append([]string{"token", "create", "--store", clusterStore, "--state-dir", "/state"}, args...)...)
	s, i := tokenLine.FindStringSubmatch(out), tokenID.FindStringSubmatch(out)
	if err != nil || s == nil {
		c.t.Fatalf("token create %v: %v\n%s", args, err, out)
	}
	if i != nil {
		id = i[1]
	}
	return s[1], id
}

// etcdHealthy is etcdctl's health of the cluster's members, asked in
// container via.
func (c *cluster) etcdHealthy(via string) (int, string) {
	out, errOut, _ := c.dexec(via, nil, "etcdctl", "--endpoints", etcdEndpoints, "--command-timeout", "3s", "endpoint", "health")
	return strings.Count(out+errOut, "is healthy"), out + errOut
}

// etcdLeader asks etcd's members (all three, or those named) from
// container via, on etcd_net, which member leads: the service name of the
// endpoint whose member id is the leader.
func (c *cluster) etcdLeader(via string, members ...string) (string, string) {
	endpoints := etcdEndpoints
	if len(members) > 0 {
		endpoints = strings.Join(members, ":2379,") + ":2379"
	}
	out, errOut, _ := c.dexec(via, nil, "etcdctl", "--endpoints", endpoints, "--dial-timeout", "1s", "--command-timeout", "2s", "endpoint", "status", "-w", "json")
	var st []struct {
		Endpoint string
		Status   struct {
			Header struct {
				MemberID uint64 `json:"member_id"`
			} `json:"header"`
			Leader uint64 `json:"leader"`
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &st); err != nil {
		return "", fmt.Sprintf("endpoint status: %v: %s%s", err, out, errOut)
	}
	for _, s := range st {
		if s.Status.Leader != 0 && s.Status.Header.MemberID == s.Status.Leader {
			host, _, _ := strings.Cut(strings.TrimPrefix(s.Endpoint, "http://"), ":")
			return host, ""
		}
	}
	return "", "no endpoint is the leader: " + out + errOut
}

// readyz is the status of a relay's /readyz (asked inside its container):
// 200, 503, or 0 with what went wrong.
func (c *cluster) readyz(relay string) (int, string) {
	_, errOut, code := c.dexec(relay, nil, "timeout", "10", "wget", "-q", "-O", "/dev/null", "http://127.0.0.1:9090/readyz")
	switch {
	case code == 0:
		return 200, ""
	case strings.Contains(errOut, " 503"):
		return 503, errOut
	}
	return 0, fmt.Sprintf("status %d: %s", code, errOut)
}

// adminGet fetches a path of a relay's admin endpoint.
func (c *cluster) adminGet(relay, path string) (string, error) {
	out, errOut, code := c.dexec(relay, nil, "timeout", "10", "wget", "-q", "-O", "-", "http://127.0.0.1:9090"+path)
	if code != 0 {
		return out, fmt.Errorf("GET %s on %s: status %d: %s", path, relay, code, errOut)
	}
	return out, nil
}

// metric is the value of an unlabelled metric on a relay's /metrics.
func (c *cluster) metric(relay, name string) float64 {
	out, err := c.adminGet(relay, "/metrics")
	if err != nil {
		return -1
	}
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + `\s+(\S+)$`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

var relayName = regexp.MustCompile(`\brelay[1-3]\b`)

// executorRelays lists, through relay, each executor and the relays it is
// joined to (outpost executors ls).
func (c *cluster) executorRelays(relay string) (map[string][]string, string) {
	out, errOut, code := c.outpost(relay, nil, 30, "executors", "ls")
	if code != 0 {
		return nil, fmt.Sprintf("executors ls via %s: status %d: %s", relay, code, errOut)
	}
	res := map[string][]string{}
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || !strings.HasPrefix(f[0], "exec") {
			continue
		}
		rs := relayName.FindAllString(strings.Join(f[2:], " "), -1)
		sort.Strings(rs)
		res[f[0]] = slices.Compact(rs)
	}
	return res, out
}

// start brings the stack up in order — etcd, tokens, relays, executors —
// and waits until every executor runs commands through every relay.
func (c *cluster) start() {
	t := c.t
	t.Helper()
	begin := time.Now()
	if out, err := c.compose("up", "-d", "etcd1", "etcd2", "etcd3"); err != nil {
		t.Fatalf("compose up etcd: %v\n%s", err, out)
	}
	d := poll(t, "etcd cluster healthy", 60*time.Second, 300*time.Millisecond, func() (bool, string) {
		n, out := c.etcdHealthy("etcd1")
		return n == 3, out
	})
	t.Logf("etcd: 3 members healthy after %v", d)

	join1, _ := c.token("--join", "--uses", "1")
	join2, _ := c.token("--join", "--uses", "1")
	client, _ := c.token("--client", "--executors", "exec*")
	c.setEnv("OUTPOST_JOIN_TOKEN_1", join1)
	c.setEnv("OUTPOST_JOIN_TOKEN_2", join2)
	c.setEnv("OUTPOST_CLIENT_TOKEN", client)

	if out, err := c.compose("up", "-d", "relay1", "relay2", "relay3", "client"); err != nil {
		t.Fatalf("compose up relays: %v\n%s", err, out)
	}
	d = poll(t, "relays ready", 60*time.Second, 300*time.Millisecond, func() (bool, string) {
		for _, r := range clusterRelays {
			if st, msg := c.readyz(r); st != 200 {
				return false, r + ": " + msg
			}
		}
		return true, ""
	})
	t.Logf("relays: /readyz 200 on all three after %v", d)
	d = poll(t, "relays list each other on /peers", 30*time.Second, 300*time.Millisecond, func() (bool, string) {
		for _, r := range clusterRelays {
			out, err := c.adminGet(r, "/peers")
			if err != nil {
				return false, err.Error()
			}
			var st struct {
				Ready string
				Peers []struct{ ID string }
			}
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				return false, fmt.Sprintf("%s /peers: %v: %s", r, err, out)
			}
			var ids []string
			for _, p := range st.Peers {
				ids = append(ids, p.ID)
			}
			sort.Strings(ids)
			want := slices.DeleteFunc(slices.Clone(clusterRelays), func(x string) bool { return x == r })
			if st.Ready != "ok" || !slices.Equal(ids, want) {
				return false, fmt.Sprintf("%s /peers: %s", r, out)
			}
		}
		return true, ""
	})
	t.Logf("relays: each lists the other two on /peers after %v", d)
	if out, err := c.compose("up", "-d", "exec1", "exec2"); err != nil {
		t.Fatalf("compose up executors: %v\n%s", err, out)
	}
	d = poll(t, "executors joined to two relays each", 90*time.Second, 500*time.Millisecond, func() (bool, string) {
		for _, r := range clusterRelays {
			rel, out := c.executorRelays(r)
			for _, e := range clusterExecutors {
				if len(rel[e]) != 2 {
					return false, fmt.Sprintf("via %s: %s on %v\n%s", r, e, rel[e], out)
				}
			}
		}
		return true, ""
	})
	t.Logf("executors: each joined to two relays after %v", d)
	c.waitCommands(clusterRelays, 60*time.Second)
	t.Logf("stack up in %v", since(begin))
}

// waitCommands waits until a command starts on every executor through
// each of relays, and returns how long the slowest took.
func (c *cluster) waitCommands(relays []string, d time.Duration) time.Duration {
	c.t.Helper()
	var slowest time.Duration
	for _, r := range relays {
		for _, e := range clusterExecutors {
			want := "ran " + e + " via " + r + "\n"
			took := poll(c.t, "a command on "+e+" through "+r, d, 300*time.Millisecond, func() (bool, string) {
				out, errOut, code := c.outpost(r, nil, 30, "exec", "--executor", e, "--", "echo", "ran", e, "via", r)
				return code == 0 && out == want, fmt.Sprintf("status %d, stdout %q, stderr %s", code, out, errOut)
			})
			slowest = max(slowest, took)
		}
	}
	return slowest
}

// checkIsolation checks each role sees only the networks it should: the
// client the relays, the executors the relays, the relays everything.
func (c *cluster) checkIsolation() {
	c.t.Helper()
	sees := func(from, name string) bool {
		_, _, code := c.dexec(from, nil, "nslookup", name)
		return code == 0
	}
	for _, x := range []struct {
		from       string
		yes, never []string
	}{
		{"client", []string{"relay", "relay1", "relay2", "relay3"}, []string{"exec1", "exec2", "etcd1", "etcd2", "etcd3"}},
		{"exec1", []string{"relay1", "relay2", "relay3"}, []string{"etcd1", "etcd2", "etcd3", "client"}},
		{"relay1", []string{"etcd1", "etcd2", "etcd3", "relay2", "relay3", "exec1", "exec2"}, nil},
	} {
		for _, n := range x.yes {
			if !sees(x.from, n) {
				c.t.Fatalf("network isolation: %s cannot resolve %s", x.from, n)
			}
		}
		for _, n := range x.never {
			if sees(x.from, n) {
				c.t.Fatalf("network isolation: %s can resolve %s", x.from, n)
			}
		}
	}
}

// streamScript prints 1..50000, a thousand lines every 0.2 s (about 10 s).
const streamScript = "i=0; while [ $i -lt 50 ]; do seq $((i*1000+1)) $((i*1000+1000)); sleep 0.2; i=$((i+1)); done"

func streamWant() string {
	var b strings.Builder
	for i := 1; i <= 50000; i++ {
		fmt.Fprintf(&b, "%d\n", i)
	}
	return b.String()
}

type streamResult struct {
	out, errOut string
	code        int
	took        time.Duration
}

// stream starts streamScript on exec1 through relay and returns the
// channel its result arrives on.
func (c *cluster) stream(relay string) <-chan streamResult {
	ch := make(chan streamResult, 1)
	go func() {
		start := time.Now()
		out, errOut, code := c.outpost(relay, nil, 180, "exec", "--reconnect-for", "120s", "--offline-grace", "60s",
			"--executor", "exec1", "--", "sh", "-c", streamScript)
		ch <- streamResult{out, errOut, code, since(start)}
	}()
	return ch
}

func checkStream(t *testing.T, what string, r streamResult) {
	t.Helper()
	want := streamWant()
	if r.code != 0 {
		t.Fatalf("%s: the command failed (status %d) after %v: %s\nstdout ends %q", what, r.code, r.took, r.errOut, tail(r.out))
	}
	if r.out != want {
		i := 0
		for i < len(r.out) && i < len(want) && r.out[i] == want[i] {
			i++
		}
		t.Fatalf("%s: output differs: got %d bytes, want %d; first difference at byte %d: %q", what, len(r.out), len(want), i, r.out[max(0, i-40):min(len(r.out), i+160)])
	}
	t.Logf("%s: %d bytes byte-exact in %v (client stderr: %q)", what, len(r.out), r.took, strings.TrimSpace(r.errOut))
}

// kill kills a service's container (SIGKILL: no drain, no goodbye) and
// returns when.
func (c *cluster) kill(svc string) time.Time {
	c.t.Helper()
	at := time.Now()
	if out, err := run(c.t, "", nil, "docker", "kill", c.id(svc)); err != nil {
		c.t.Fatalf("docker kill %s: %v\n%s", svc, err, out)
	}
	return at
}

// resumedThrough names the relays (of candidates) that logged a client
// connecting to executor exec since t: where a resumed stream went.
func (c *cluster) resumedThrough(exec string, t time.Time, candidates ...string) []string {
	c.t.Helper()
	var got []string
	for _, r := range candidates {
		out, err := run(c.t, "", nil, "docker", "logs", "--since", fmt.Sprintf("%d.%09d", t.Unix(), t.Nanosecond()), c.id(r))
		if err != nil {
			c.t.Fatalf("docker logs %s: %v\n%s", r, err, out)
		}
		for _, line := range strings.Split(out, "\n") {
			if strings.Contains(line, "client connected") && strings.Contains(line, `"executor": "`+exec+`"`) {
				got = append(got, r)
				break
			}
		}
	}
	return got
}

// 1. A relay dies while a command streams through it: the output arrives
// complete and byte-exact through another relay. Twice: first the relay
// on the executor's side of a forwarded stream (the client's relay
// forwards to a peer holding the executor, and the client resumes through
// its relay, which forwards to the executor's other relay); then the
// relay the client itself is connected to (the client dials "relay",
// every relay's name on the client network, and resumes through another).
func testRelayKilledMidStream(t *testing.T, root string) {
	c := newCluster(t, root)
	c.start()
	c.checkIsolation()

	rel, out := c.executorRelays("relay1")
	on := rel["exec1"]
	var via string
	for _, r := range clusterRelays {
		if !slices.Contains(on, r) {
			via = r
		}
	}
	if len(on) != 2 || via == "" {
		t.Fatalf("exec1 should be joined to two relays of three: %v\n%s", on, out)
	}

	// (a) The executor's side of a forwarded stream.
	start := time.Now()
	res := c.stream(via)
	var carrier string
	poll(t, "the relay carrying exec1's stream", 15*time.Second, 100*time.Millisecond, func() (bool, string) {
		for _, r := range on {
			if c.metric(r, "outpost_relay_spliced_streams") > 0 {
				carrier = r
				return true, ""
			}
		}
		return false, "no spliced stream on " + strings.Join(on, " or ")
	})
	time.Sleep(time.Second) // some output has gone through it
	select {
	case r := <-res:
		t.Fatalf("the command ended before the kill: %+v", r)
	default:
	}
	killed := c.kill(carrier)
	t.Logf("client via %s, forwarded to %s (exec1 on %v); killed %s %v after the start", via, carrier, on, carrier, since(start))
	checkStream(t, "killed the executor's relay "+carrier, <-res)
	var survivors []string
	for _, r := range clusterRelays {
		if r != carrier {
			survivors = append(survivors, r)
		}
	}
	// The client came back through its relay, which forwarded it to
	// exec1's other relay, or spliced it itself if exec1 had meanwhile
	// moved its lost session there.
	got := c.resumedThrough("exec1", killed, survivors...)
	if !slices.Contains(got, via) {
		t.Fatalf("after killing %s, the stream resumed through %v: want %s (the client's relay) among them", carrier, got, via)
	}
	now, _ := c.executorRelays(via)
	t.Logf("resumed through %v; exec1 now on %v", got, now["exec1"])

	// (b) The client's own relay.
	start = time.Now()
	res = c.stream("relay")
	var clientRelay string
	ips := map[string]string{}
	for _, r := range survivors {
		out, err := run(t, "", nil, "docker", "inspect", "-f", `{{(index .NetworkSettings.Networks "`+c.network("client_net")+`").IPAddress}}`, c.id(r))
		if err != nil {
			t.Fatalf("docker inspect %s: %v\n%s", r, err, out)
		}
		ips[strings.TrimSpace(out)] = r
	}
	poll(t, "the client's relay", 15*time.Second, 100*time.Millisecond, func() (bool, string) {
		out, _, _ := c.dexec("client", nil, "netstat", "-tn")
		for _, line := range strings.Split(out, "\n") {
			f := strings.Fields(line)
			if len(f) >= 6 && f[5] == "ESTABLISHED" && strings.HasSuffix(f[4], ":7443") {
				if r := ips[strings.TrimSuffix(f[4], ":7443")]; r != "" {
					clientRelay = r
					return true, ""
				}
			}
		}
		return false, out
	})
	time.Sleep(time.Second)
	select {
	case r := <-res:
		t.Fatalf("the command ended before the kill: %+v", r)
	default:
	}
	killed = c.kill(clientRelay)
	t.Logf("client connected to %s (as \"relay\"); killed it %v after the start", clientRelay, since(start))
	checkStream(t, "killed the client's relay "+clientRelay, <-res)
	last := survivors[0]
	if last == clientRelay {
		last = survivors[1]
	}
	if got := c.resumedThrough("exec1", killed, last); len(got) != 1 {
		t.Fatalf("after killing %s, the stream did not resume through %s, the last relay", clientRelay, last)
	}
}

// 2. The etcd leader dies: a new one is elected, and new commands keep
// starting through every relay; tokens are made and redeemed (etcd
// writes) as before.
func testEtcdLeaderKilled(t *testing.T, root string) {
	c := newCluster(t, root)
	c.start()
	var leader string
	poll(t, "the etcd leader", 10*time.Second, 200*time.Millisecond, func() (bool, string) {
		var msg string
		leader, msg = c.etcdLeader("etcd1")
		return leader != "", msg
	})
	var survivors []string
	for _, e := range []string{"etcd1", "etcd2", "etcd3"} {
		if e != leader {
			survivors = append(survivors, e)
		}
	}
	c.kill(leader)
	killed := time.Now()
	t.Logf("killed the etcd leader %s", leader)
	var newLeader string
	d := poll(t, "a new etcd leader", 30*time.Second, 100*time.Millisecond, func() (bool, string) {
		var msg string
		newLeader, msg = c.etcdLeader(survivors[0], survivors...)
		return newLeader != "" && newLeader != leader, msg
	})
	t.Logf("etcd: %s leads after %v", newLeader, d)
	slowest := c.waitCommands(clusterRelays, 60*time.Second)
	t.Logf("commands started on both executors through all three relays, %v after the kill (slowest wait %v)", since(killed), slowest)
	for _, r := range clusterRelays {
		if st, msg := c.readyz(r); st != 200 {
			t.Fatalf("%s not ready after the leader change: %s", r, msg)
		}
	}
	// Writes after the election: a single-use token made now is redeemed
	// once, and only once.
	// once, and only once: by one client key (its later connects spend
	// nothing), never by another.
	tok, _ := c.token("--client", "--uses", "1", "--executors", "exec*")
	env := []string{"OUTPOST_TOKEN=" + tok, "XDG_CONFIG_HOME=/tmp/election-holder"}
	if _, errOut, code := c.outpost("relay2", env, 60, "executors", "ls"); code != 0 {
		t.Fatalf("a new single-use token via relay2: status %d: %s", code, errOut)
	}
	for i, r := range []string{"relay1", "relay3"} {
		other := []string{"OUTPOST_TOKEN=" + tok, fmt.Sprintf("XDG_CONFIG_HOME=/tmp/election-other-%d", i)}
		if _, errOut, code := c.outpost(r, other, 60, "executors", "ls"); code != codeRefused {
			t.Fatalf("the used single-use token again via %s, by another client: status %d, want %d: %s", r, code, codeRefused, errOut)
		}
		if _, errOut, code := c.outpost(r, env, 60, "executors", "ls"); code != 0 {
			t.Fatalf("the single-use token's holder again via %s: status %d: %s", r, code, errOut)
		}
	}
}

// 3. A relay is cut off from etcd: it reports not ready, its executors
// stay reachable through the other relays, and a single-use token is
// never redeemed twice — through the cut-off relay it fails (unavailable)
// rather than succeed on its own.
func testRelayPartitionedFromEtcd(t *testing.T, root string) {
	c := newCluster(t, root)
	c.start()
	rel, out := c.executorRelays("relay1")
	if len(rel["exec1"]) == 0 {
		t.Fatalf("exec1 is on no relay:\n%s", out)
	}
	p := rel["exec1"][0] // a relay carrying exec1
	var others []string
	for _, r := range clusterRelays {
		if r != p {
			others = append(others, r)
		}
	}
	t1, _ := c.token("--client", "--uses", "1", "--executors", "exec*")
	t2, _ := c.token("--client", "--uses", "1", "--executors", "exec*")
	// Each redemption is a new client (its own key, XDG_CONFIG_HOME): a
	// use is spent per client key, and a key holding one reconnects free.
	clients := 0
	redeem := func(relay, tok string) (int, string) {
		clients++
		home := fmt.Sprintf("XDG_CONFIG_HOME=/tmp/redeem-client-%d-%d", time.Now().UnixNano(), clients)
		_, errOut, code := c.outpost(relay, []string{"OUTPOST_TOKEN=" + tok, home}, 90, "executors", "ls")
		return code, strings.TrimSpace(errOut)
	}

	etcdNet := c.network("etcd_net")
	if out, err := run(t, "", nil, "docker", "network", "disconnect", etcdNet, c.id(p)); err != nil {
		t.Fatalf("disconnect %s from etcd: %v\n%s", p, err, out)
	}
	cut := time.Now()
	t.Logf("cut %s (exec1 on %v) off etcd_net", p, rel["exec1"])
	d := poll(t, p+" /readyz 503", 60*time.Second, 200*time.Millisecond, func() (bool, string) {
		st, msg := c.readyz(p)
		return st == 503, fmt.Sprintf("status %d %s", st, msg)
	})
	t.Logf("%s: /readyz 503 after %v", p, d)
	for _, r := range others {
		if st, msg := c.readyz(r); st != 200 {
			t.Fatalf("%s not ready while %s is cut off: %d %s", r, p, st, msg)
		}
	}
	slowest := c.waitCommands(others, 60*time.Second)
	t.Logf("both executors reachable through %v (slowest wait %v, %v after the cut)", others, slowest, since(cut))

	// t1: first through the cut-off relay (fails, and consumes nothing),
	// then once through a peer, then never again.
	if code, msg := redeem(p, t1); code != codeTransport {
		t.Fatalf("t1 via the cut-off %s: status %d, want %d (unavailable): %s", p, code, codeTransport, msg)
	} else {
		t.Logf("t1 via the cut-off %s: status %d: %s", p, code, msg)
	}
	if code, msg := redeem(others[0], t1); code != 0 {
		t.Fatalf("t1 via %s: status %d: %s", others[0], code, msg)
	}
	if code, msg := redeem(others[1], t1); code != codeRefused {
		t.Fatalf("t1 again via %s: status %d, want %d: %s", others[1], code, codeRefused, msg)
	}
	// t2: first through a peer, then through the cut-off relay.
	if code, msg := redeem(others[1], t2); code != 0 {
		t.Fatalf("t2 via %s: status %d: %s", others[1], code, msg)
	}
	for _, tok := range []string{t1, t2} {
		if code, msg := redeem(p, tok); code == 0 || code == codeRefused {
			// Refused would mean it answered from a cache; success, a split.
			t.Fatalf("a used token via the cut-off %s: status %d, want %d (unavailable): %s", p, code, codeTransport, msg)
		}
	}

	// Healed: ready again, and the used tokens stay used.
	if out, err := run(t, "", nil, "docker", "network", "connect", etcdNet, c.id(p)); err != nil {
		t.Fatalf("reconnect %s to etcd: %v\n%s", p, err, out)
	}
	healed := time.Now()
	d = poll(t, p+" /readyz 200 after the heal", 60*time.Second, 200*time.Millisecond, func() (bool, string) {
		st, msg := c.readyz(p)
		return st == 200, fmt.Sprintf("status %d %s", st, msg)
	})
	t.Logf("%s: /readyz 200 %v after the heal", p, d)
	for _, tok := range []string{t1, t2} {
		if code, msg := redeem(p, tok); code != codeRefused {
			t.Fatalf("a used token via the healed %s: status %d, want %d: %s", p, code, codeRefused, msg)
		}
	}
	c.waitCommands([]string{p}, 60*time.Second)
	t.Logf("commands through the healed %s %v after the heal", p, since(healed))
}

// 4. 100 clients (each its own key: a use is spent per client key)
// redeem one single-use token at once, spread over the three relays:
// exactly one succeeds.
func testConcurrentRedemptions(t *testing.T, root string) {
	c := newCluster(t, root)
	c.start()
	tok, id := c.token("--client", "--uses", "1", "--executors", "exec*")
	// Each of 100 subshells waits for /tmp/go, then lists executors with
	// the token through relay 1, 2 or 3 in turn and writes its status.
	script := `
fp=$1; tok=$2; rm -rf /tmp/redeem; mkdir /tmp/redeem; cd /tmp/redeem
i=0
while [ $i -lt 100 ]; do
  r=relay$((i % 3 + 1))
  ( while [ ! -e go ]; do usleep 5000; done
    XDG_CONFIG_HOME=/tmp/redeem/home.$i timeout -s KILL 90 outpost executors ls --relay outpost://$r:7443#$fp --token $tok >/dev/null 2>err.$i
    echo "$i $r $?" >rc.$i ) &
  i=$((i+1))
done
sleep 1; touch go; wait
cat rc.*
for f in err.*; do [ -s $f ] && echo "$f: $(head -c 300 $f)"; done; true`
	start := time.Now()
	out, errOut, code := c.dexec("client", nil, "sh", "-c", script, "sh", c.fp, tok)
	if code != 0 {
		t.Fatalf("the redemption script: status %d: %s\n%s", code, errOut, out)
	}
	took := since(start)
	byCode := map[int][]string{}
	n := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) != 3 || strings.HasPrefix(f[0], "err.") {
			continue
		}
		st, err := strconv.Atoi(f[2])
		if err != nil {
			continue
		}
		n++
		byCode[st] = append(byCode[st], f[1])
	}
	summary := ""
	for st, rs := range byCode {
		summary += fmt.Sprintf(" status %d: %d;", st, len(rs))
	}
	t.Logf("100 concurrent redemptions in %v:%s", took, summary)
	if n != 100 {
		t.Fatalf("%d results, want 100:\n%s", n, out)
	}
	if len(byCode[0]) != 1 {
		t.Fatalf("%d redemptions of one single-use token succeeded, want exactly 1 (via %v):\n%s", len(byCode[0]), byCode[0], out)
	}
	if len(byCode[codeRefused]) != 99 {
		t.Fatalf("of the 99 other redemptions, %d were refused (status %d); the rest failed otherwise:\n%s", len(byCode[codeRefused]), codeRefused, out)
	}
	t.Logf("the one success went through %s", byCode[0][0])
	// The store agrees: the token is used up, 1/1.
	if id != "" {
		out, err := c.tool("token", "ls", "--store", clusterStore, "--state-dir", "/state")
		m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(id) + `\s.*$`).FindString(out)
		if err != nil || !strings.Contains(m, "used up") || !strings.Contains(m, "1/1") {
			t.Fatalf("token ls: the token %s should be used up, 1/1: %v\n%s", id, err, out)
		}
	}
}
