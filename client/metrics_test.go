package client

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/internal/admin"
)

func scrape(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

func TestAdminEndpointCountsProcessesByExitClass(t *testing.T) {
	reg := prometheus.NewRegistry()
	adm, err := admin.Listen("127.0.0.1:0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	env := localFiles(t, func(c *executor.Config) { c.Metrics = executor.NewMetrics(reg) })
	for _, script := range []string{"exit 0", "exit 0", "exit 3", "kill -KILL $$"} {
		// A signal death is reported as an error; the others are results.
		if _, err := Exec(ctxT(t), env, ExecRequest{Argv: sh(script), Env: testEnv}); err != nil && !strings.Contains(script, "kill") {
			t.Fatalf("%s: %v", script, err)
		}
	}
	base := "http://" + adm.Addr().String()
	want := []string{
		"outpost_executor_process_starts_total 4",
		`outpost_executor_process_exits_total{class="ok"} 2`,
		`outpost_executor_process_exits_total{class="error"} 1`,
		`outpost_executor_process_exits_total{class="signal"} 1`,
		"outpost_executor_processes_running 0",
		"go_goroutines",
	}
	// The exit is counted just after the client sees it; poll briefly.
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, body := scrape(t, base+"/metrics")
		missing := ""
		for _, w := range want {
			if !strings.Contains(body, w) {
				missing = w
				break
			}
		}
		if code == 200 && missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status %d, missing %q in:\n%s", code, missing, body)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if code, _ := scrape(t, base+"/livez"); code != 200 {
		t.Fatalf("livez %d", code)
	}
	if code, _ := scrape(t, base+"/readyz"); code != 200 {
		t.Fatalf("readyz %d", code)
	}
	adm.Stopping()
	if code, _ := scrape(t, base+"/readyz"); code != http.StatusServiceUnavailable {
		t.Fatalf("readyz while stopping: %d, want 503", code)
	}
}
