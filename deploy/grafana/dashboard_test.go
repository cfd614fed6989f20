// Package grafana holds the Grafana dashboard of deploy/ and the test that
// keeps it honest: every metric a panel queries must be one a real relay
// or a real executor exports.
package grafana

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
)

const dashboardFile = "outpost-dashboard.json"

// TestDashboardQueriesOnlyExportedMetrics runs a relay and an executor
// (the outpost binary, as deployed) with their admin endpoints, runs a
// command through them so that labelled series exist, scrapes both, and
// checks every metric name in every panel query and template variable of
// the dashboard against what they export.
func TestDashboardQueriesOnlyExportedMetrics(t *testing.T) {
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	queries, err := dashboardQueries(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(queries) < 10 {
		t.Fatalf("the dashboard has %d queries; it was not read right", len(queries))
	}
	exported := scrapeRunningOutpost(t)
	if bad := unexported(queries, exported); len(bad) > 0 {
		for _, m := range bad {
			t.Error(m)
		}
		t.Logf("exported: %s", strings.Join(sortedKeys(exported), " "))
	}
	// Every exported outpost metric family is on the dashboard, so a new
	// metric gets a panel (or a decision here not to).
	used := map[string]bool{}
	for _, q := range queries {
		for _, n := range metricNames(q.expr) {
			used[n] = true
		}
	}
	for name := range exported {
		if strings.HasPrefix(name, "outpost_") && !used[name] && !notOnDashboard[name] {
			t.Errorf("%s is exported but on no panel of %s", name, dashboardFile)
		}
	}
}

// notOnDashboard are exported metrics the dashboard leaves out on purpose.
var notOnDashboard = map[string]bool{
	// Only with per-command cgroups, which many hosts (and containers)
	// lack; the exits and limits panels cover what it would warn of.
	"outpost_executor_cgroups_lingering": true,
	// The chunk count says the same as the evicted bytes panel.
	"outpost_executor_retention_evicted_chunks_total": true,
}

// The check itself must catch a misspelt metric, wherever it hides.
func TestDashboardCheckCatchesMisspeltMetrics(t *testing.T) {
	exported := map[string]bool{"outpost_relay_executors": true, "outpost_executor_process_starts_total": true, "go_goroutines": true}
	for _, tc := range []struct {
		dashboard string
		bad       string
	}{
		{`{"panels":[{"targets":[{"expr":"sum(outpost_relay_executor)"}]}]}`, "outpost_relay_executor"},
		{`{"panels":[{"type":"row","panels":[{"targets":[{"expr":"rate(outpost_executor_process_start_total{instance=~\"$executor\"}[$__rate_interval])"}]}]}]}`, "outpost_executor_process_start_total"},
		{`{"panels":[{"targets":[{"expr":"outpost_relay_executors + on (instance) go_goroutine"}]}]}`, "go_goroutine"},
		{`{"templating":{"list":[{"name":"x","query":{"query":"label_values(outpost_relay_executorz, instance)"}}]}}`, "outpost_relay_executorz"},
		{`{"templating":{"list":[{"name":"x","query":"label_values(outpost_relay_executorz{job=\"a\"}, instance)"}]}}`, "outpost_relay_executorz"},
		{`{"panels":[{"targets":[{"expr":"sum by (instance) (1)"}]}]}`, "no metric"},
	} {
		queries, err := dashboardQueries([]byte(tc.dashboard))
		if err != nil {
			t.Fatal(err)
		}
		bad := unexported(queries, exported)
		if len(bad) != 1 || !strings.Contains(bad[0], tc.bad) {
			t.Errorf("%s: got %q, want one complaint about %s", tc.dashboard, bad, tc.bad)
		}
	}
}

func TestMetricNames(t *testing.T) {
	for expr, want := range map[string][]string{
		`sum by (instance) (rate(outpost_relay_spliced_bytes_total{instance=~"$relay"}[$__rate_interval]))`: {"outpost_relay_spliced_bytes_total"},
		`sum(increase(a_total[1h])) + sum(increase(b_total{x="c_total"}[1h] offset 5m))`:                    {"a_total", "b_total"},
		`histogram_quantile(0.99, sum by (le) (rate(x_seconds_bucket[5m])))`:                                {"x_seconds_bucket"},
		`a / on (instance) group_left (job) b unless c`:                                                     {"a", "b", "c"},
		`sum without (class) (d) > bool 1e3`:                                                                {"d"},
		`topk(3, e:recorded)`:                                                                               {"e:recorded"},
	} {
		got := metricNames(expr)
		if !slices.Equal(got, want) {
			t.Errorf("metricNames(%q) = %q, want %q", expr, got, want)
		}
	}
}

// query is one PromQL expression of the dashboard and where it is.
type query struct {
	where, expr string
}

// dashboardQueries returns every panel target's expr (rows' panels
// included) and every query variable's label_values(...) metric selector.
func dashboardQueries(b []byte) ([]query, error) {
	var d struct {
		Panels     []panel `json:"panels"`
		Templating struct {
			List []struct {
				Name  string          `json:"name"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, err
	}
	var out []query
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, query{fmt.Sprintf("panel %q target %s", p.Title, tg.RefID), tg.Expr})
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	labelValues := regexp.MustCompile(`label_values\(\s*([^,)]+)`)
	for _, v := range d.Templating.List {
		var q string
		if json.Unmarshal(v.Query, &q) != nil {
			var obj struct {
				Query string `json:"query"`
			}
			json.Unmarshal(v.Query, &obj)
			q = obj.Query
		}
		if m := labelValues.FindStringSubmatch(q); m != nil {
			out = append(out, query{fmt.Sprintf("variable %q", v.Name), m[1]})
		}
	}
	return out, nil
}

type panel struct {
	Title   string  `json:"title"`
	Panels  []panel `json:"panels"`
	Targets []struct {
		RefID string `json:"refId"`
		Expr  string `json:"expr"`
	} `json:"targets"`
}

// unexported describes each query that names a metric not in exported, or
// names none at all (a query the extraction could not read is no check).
func unexported(queries []query, exported map[string]bool) []string {
	var bad []string
	for _, q := range queries {
		names := metricNames(q.expr)
		if len(names) == 0 {
			bad = append(bad, fmt.Sprintf("%s: no metric in %q", q.where, q.expr))
		}
		for _, n := range names {
			if !exported[n] {
				bad = append(bad, fmt.Sprintf("%s: %s is exported by neither the relay nor an executor (in %q)", q.where, n, q.expr))
			}
		}
	}
	return bad
}

var (
	promStrings  = regexp.MustCompile("\"(?:[^\"\\\\]|\\\\.)*\"|'(?:[^'\\\\]|\\\\.)*'|`[^`]*`")
	promMatchers = regexp.MustCompile(`\{[^}]*\}|\[[^\]]*\]`)
	promGrouping = regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`)
	promIdent    = regexp.MustCompile(`(?:^|[^A-Za-z0-9_:.$])([A-Za-z_:][A-Za-z0-9_:]*)`)
	promKeywords = map[string]bool{"and": true, "or": true, "unless": true, "by": true, "without": true, "on": true, "ignoring": true,
		"group_left": true, "group_right": true, "bool": true, "offset": true, "inf": true, "nan": true, "atan2": true}
)

// metricNames are the metric names a PromQL expression selects, in order,
// each once: identifiers outside strings, label matchers, ranges and
// grouping lists that are neither keywords nor called as functions.
func metricNames(expr string) []string {
	s := promStrings.ReplaceAllString(expr, " ")
	s = promMatchers.ReplaceAllString(s, " ")
	s = promGrouping.ReplaceAllString(s, " ")
	var out []string
	for _, m := range promIdent.FindAllStringSubmatchIndex(s, -1) {
		name := s[m[2]:m[3]]
		rest := strings.TrimLeft(s[m[3]:], " \t\n")
		if promKeywords[strings.ToLower(name)] || strings.HasPrefix(rest, "(") || slices.Contains(out, name) {
			continue
		}
		out = append(out, name)
	}
	return out
}

// scrapeRunningOutpost starts a relay and an executor joined to it, with
// --admin-listen, runs a command through them, and returns every metric
// name their /metrics serve (a histogram's or summary's with its _bucket,
// _sum and _count series).
func scrapeRunningOutpost(t *testing.T) map[string]bool {
	t.Helper()
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "outpost")
	build := exec.Command("go", "build", "-o", bin, "./cmd/outpost")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	relayState := filepath.Join(dir, "relay")

	relayOut, relayLog := start(t, bin, "relay", "serve", "--listen", "tcp://127.0.0.1:0", "--state-dir", relayState, "--admin-listen", "127.0.0.1:0")
	relayURL, err := bufio.NewReader(relayOut).ReadString('\n')
	if err != nil {
		t.Fatalf("relay: %v\n%s", err, relayLog)
	}
	relayURL = strings.TrimSpace(relayURL)
	relayAdmin := waitFor(t, relayLog, regexp.MustCompile(`admin: http://(\S+)/metrics`))
	token := func(args ...string) string {
		out, err := exec.Command(bin, append([]string{"token", "create", "--state-dir", relayState}, args...)...).Output()
		if err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(out))
	}
	joinTok, clientTok := token("--join", "--uses", "1"), token("--client")

	_, execLog := start(t, bin, "executor", "join", "--relay", relayURL, "--token", joinTok, "--id", "e-1",
		"--state-dir", filepath.Join(dir, "exec"), "--admin-listen", "127.0.0.1:0")
	execAdmin := waitFor(t, execLog, regexp.MustCompile(`admin: http://(\S+)/metrics`))
	waitFor(t, execLog, regexp.MustCompile(`()joined the relay`))

	// One command through the relay: the exit classes and spliced bytes
	// appear only once something has happened.
	cmd := exec.Command(bin, "exec", "--relay", relayURL, "--executor", "e-1", "--", "sh", "-c", "echo metrics")
	cmd.Env = append(os.Environ(), "XDG_CONFIG_HOME="+filepath.Join(dir, "cfg"), "OUTPOST_TOKEN="+clientTok)
	if out, err := cmd.CombinedOutput(); err != nil || !strings.Contains(string(out), "metrics") {
		t.Fatalf("outpost exec through the relay: %v\n%s", err, out)
	}

	names := map[string]bool{}
	for _, addr := range []string{relayAdmin, execAdmin} {
		for n := range scrape(t, addr) {
			names[n] = true
		}
	}
	return names
}

// scrape reads http://addr/metrics in the text exposition format.
func scrape(t *testing.T, addr string) map[string]bool {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape %s: %v %s", addr, err, resp.Status)
	}
	names := map[string]bool{}
	for _, line := range strings.Split(string(body), "\n") {
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			switch f[3] {
			case "histogram":
				names[f[2]+"_bucket"], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
			case "summary":
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
		} else if line != "" && !strings.HasPrefix(line, "#") {
			names[strings.FieldsFunc(line, func(r rune) bool { return r == '{' || r == ' ' })[0]] = true
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s/metrics served nothing", addr)
	}
	return names
}

// logBuffer collects a process's stderr for polling.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// start runs bin with args until the test ends (SIGTERM, then wait).
func start(t *testing.T, bin string, args ...string) (io.Reader, *logBuffer) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stdout, _ := cmd.StdoutPipe()
	log := new(logBuffer)
	cmd.Stderr = log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Signal(syscall.SIGTERM); cmd.Wait() })
	return stdout, log
}

// waitFor polls log until re matches, for up to 20 s, and returns its
// first group.
func waitFor(t *testing.T, log *logBuffer, re *regexp.Regexp) string {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if m := re.FindStringSubmatch(log.String()); m != nil {
			return m[1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s within 20 s in:\n%s", re, log.String())
		}
	}
}

// sortedKeys is for messages.
func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
