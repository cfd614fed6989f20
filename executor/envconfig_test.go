//go:build linux || darwin || freebsd

package executor

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/pathmap"
)

// writeFiles lays out rel → content under base.
func writeFiles(t *testing.T, base string, files map[string]string) {
	t.Helper()
	for rel, content := range files {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// codexHomeEnv points HOME, CODEX_HOME and the system directory into a
// fresh tree, restored after the test.
func codexHomeEnv(t *testing.T) (base string) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", filepath.Join(base, "home"))
	t.Setenv("CODEX_HOME", "")
	old := codexSystemDir
	codexSystemDir = filepath.Join(base, "etc")
	t.Cleanup(func() { codexSystemDir = old })
	os.MkdirAll(filepath.Join(base, "home"), 0o755)
	return base
}

func configParams(cwd string, paths ...[]string) map[string]any {
	if paths == nil {
		paths = [][]string{}
	}
	return map[string]any{"cwd": pathmap.URI(cwd), "configPaths": paths, "requirementsPaths": paths}
}

func layers(t *testing.T, res map[string]any, stack string) []map[string]any {
	t.Helper()
	st := res[stack].(map[string]any)
	var out []map[string]any
	for _, l := range st["layers"].([]any) {
		out = append(out, l.(map[string]any))
	}
	return out
}

func TestEnvironmentStatusReadyThenUnavailableWhileShuttingDown(t *testing.T) {
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.wantError(c.call("environment/status", nil), -32600, "client must call initialize before using environment status methods")
	c.init()
	if got := c.result("environment/status", map[string]any{}); got["status"] != "ready" {
		t.Fatalf("status %v, want ready", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
	defer cancel()
	if err := ts.srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	m := c.call("environment/status", nil)
	c.wantError(m, -32600, "shutting down")
	if kind := m["error"].(map[string]any)["data"].(map[string]any)["kind"]; kind != "unavailable" {
		t.Fatalf("kind %v, want unavailable", kind)
	}
}

func TestEnvironmentConfigReadLayersTrustAndProjection(t *testing.T) {
	base := codexHomeEnv(t)
	proj := filepath.Join(base, "proj")
	writeFiles(t, base, map[string]string{
		"etc/config.toml":       "[mcp_servers.sys]\nurl = \"http://sys\"\n[projects.\"" + proj + "\"]\ntrust_level = \"trusted\"\n",
		"etc/requirements.toml": "[mcp_servers.sys.identity]\ncommand = \"x\"\n",
		"home/.codex/config.toml": "model = \"m\"\n[mcp_servers.user]\ncommand = \"run\"\nargs = [\"a\", 'b\\c']\n" +
			"[mcp_servers.user.env]\nK = \"v\"\n",
		"proj/.git/HEAD":              "ref: refs/heads/main\n",
		"proj/.codex/config.toml":     "model_provider = \"evil\"\n[mcp_servers.proj]\nurl = \"http://p\"\n",
		"proj/a/b/.codex/config.toml": "[mcp_servers.deep]\nurl = \"http://d\"\nmulti = \"x\\ny\"\n",
		"proj/a/.codex/other.toml":    "not read",
	})
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	res := c.result("environmentConfig/read", configParams(filepath.Join(proj, "a", "b"), []string{"mcp_servers"}, []string{"model_provider"}))

	got := layers(t, res, "config")
	want := []struct{ source, baseDir, toml string }{
		{"system (" + base + "/etc/config.toml)", base + "/etc", "[mcp_servers.sys]\nurl = \"http://sys\"\n"},
		{"user (" + base + "/home/.codex/config.toml)", base + "/home/.codex",
			"[mcp_servers.user]\ncommand = \"run\"\nargs = [\"a\", 'b\\c']\n\n[mcp_servers.user.env]\nK = \"v\"\n"},
		// model_provider asked for, but a project may not set it.
		{"project (" + proj + "/.codex/config.toml)", proj + "/.codex", "[mcp_servers.proj]\nurl = \"http://p\"\n"},
		{"project (" + proj + "/a/b/.codex/config.toml)", proj + "/a/b/.codex", "[mcp_servers.deep]\nurl = \"http://d\"\nmulti = \"\"\"\nx\ny\"\"\"\n"},
	}
	if len(got) != len(want) {
		t.Fatalf("%d layers, want %d: %v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i]["source"] != w.source || got[i]["baseDir"] != pathmap.URI(w.baseDir) || got[i]["toml"] != w.toml {
			t.Errorf("layer %d = %v\nwant %+v", i, got[i], w)
		}
	}
	if ci := res["config"].(map[string]any)["cloudInsertionIndex"]; ci != 1.0 {
		t.Errorf("config cloudInsertionIndex %v, want 1 (after the system layer)", ci)
	}
	req := layers(t, res, "requirements")
	if len(req) != 1 || req[0]["source"] != base+"/etc/requirements.toml" || req[0]["toml"] != "[mcp_servers.sys.identity]\ncommand = \"x\"\n" {
		t.Fatalf("requirements %v", req)
	}
	if res["codexHomeDir"] != pathmap.URI(base+"/home/.codex") || res["userHomeDir"] != pathmap.URI(base+"/home") || res["hostname"] == "" {
		t.Fatalf("homes and host: %v", res)
	}

	// Nothing selected in a layer: it is left out, and the cloud index
	// counts only what is kept below it.
	res = c.result("environmentConfig/read", configParams(proj, []string{"model"}))
	got = layers(t, res, "config")
	if len(got) != 1 || got[0]["toml"] != "model = \"m\"\n" || res["config"].(map[string]any)["cloudInsertionIndex"] != 0.0 {
		t.Fatalf("projection onto model: %v", res["config"])
	}

	// Untrusted (the trust entry removed): no project layer.
	writeFiles(t, base, map[string]string{"etc/config.toml": "[mcp_servers.sys]\nurl = \"http://sys\"\n"})
	res = c.result("environmentConfig/read", configParams(filepath.Join(proj, "a", "b"), []string{"mcp_servers"}))
	for _, l := range layers(t, res, "config") {
		if strings.HasPrefix(l["source"].(string), "project") {
			t.Fatalf("untrusted project layer read: %v", l)
		}
	}
}

func TestEnvironmentConfigReadErrors(t *testing.T) {
	base := codexHomeEnv(t)
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.wantError(c.call("environmentConfig/read", configParams(base, []string{"x"})), -32600, "client must call initialize before using environment config methods")
	c.init()
	for _, tc := range []struct {
		params any
		msg    string
	}{
		{nil, "params are required"},
		{map[string]any{"configPaths": [][]string{{"x"}}}, "missing field `cwd`"},
		{map[string]any{"cwd": pathmap.URI(base), "configPaths": [][]string{{"x"}}}, "missing field `requirementsPaths`"},
		{configParams(base), "at least one config or requirements path is required"},
		{configParams(base, []string{}), "TOML paths must contain at least one key segment"},
		{map[string]any{"cwd": "relative", "configPaths": [][]string{{"x"}}, "requirementsPaths": [][]string{}}, "invalid URI"},
		{map[string]any{"cwd": pathmap.URI(base), "configPaths": make([][]string, maxConfigPaths+1), "requirementsPaths": [][]string{}}, "at most"},
	} {
		c.wantError(c.call("environmentConfig/read", tc.params), -32602, tc.msg)
	}

	// A parse error names the file and where.
	writeFiles(t, base, map[string]string{"home/.codex/config.toml": "x = [\n"})
	c.wantError(c.call("environmentConfig/read", configParams(base, []string{"x"})), -32603,
		"failed to load executor-local config: "+base+"/home/.codex/config.toml:1:")

	// CODEX_HOME that does not exist.
	t.Setenv("CODEX_HOME", filepath.Join(base, "missing"))
	c.wantError(c.call("environmentConfig/read", configParams(base, []string{"x"})), -32603, "but that path does not exist")
}

func TestEnvironmentConfigReadFilesAreBoundedAndNeverHang(t *testing.T) {
	base := codexHomeEnv(t)
	hidden := filepath.Join(base, "secret")
	writeFiles(t, base, map[string]string{"secret/config.toml": "[mcp_servers.s]\nurl = \"http://secret\"\n"})
	ts := newTestServer(t, func(cfg *Config) { cfg.SandboxHidden = append(cfg.SandboxHidden, hidden) }, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	userFile := filepath.Join(base, "home/.codex/config.toml")
	os.MkdirAll(filepath.Dir(userFile), 0o755)

	// A FIFO where config.toml belongs: refused, not waited on.
	if err := syscall.Mkfifo(userFile, 0o644); err != nil {
		t.Fatal(err)
	}
	c.wantError(c.call("environmentConfig/read", configParams(base, []string{"mcp_servers"})), -32603, "not a regular file")
	os.Remove(userFile)

	// A link into a hidden path reads as no file: the secret is not sent.
	if err := os.Symlink(filepath.Join(hidden, "config.toml"), userFile); err != nil {
		t.Fatal(err)
	}
	res := c.result("environmentConfig/read", configParams(base, []string{"mcp_servers"}))
	if l := layers(t, res, "config"); len(l) != 0 {
		t.Fatalf("a hidden file was read: %v", l)
	}
	os.Remove(userFile)

	// Over the per-file bound: an error, not a 4 MiB read.
	writeFiles(t, base, map[string]string{"home/.codex/config.toml": "x = \"" + strings.Repeat("a", maxConfigFileBytes) + "\"\n"})
	c.wantError(c.call("environmentConfig/read", configParams(base, []string{"x"})), -32603, "file too large")
}

func TestEnvironmentConfigReadCwdThroughPathMappings(t *testing.T) {
	base := codexHomeEnv(t)
	proj := filepath.Join(base, "proj")
	writeFiles(t, base, map[string]string{
		"home/.codex/config.toml": "[projects.\"" + proj + "\"]\ntrust_level = \"trusted\"\n",
		"proj/.git/HEAD":          "ref: refs/heads/main\n",
		"proj/.codex/config.toml": "[mcp_servers.p]\nurl = \"http://p\"\n",
	})
	ts := newTestServer(t, func(cfg *Config) {
		cfg.PathMappings = []pathmap.Mapping{{Client: "/workspace", Executor: proj}}
	}, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	res := c.result("environmentConfig/read", map[string]any{"cwd": "file:///workspace", "configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{}})
	l := layers(t, res, "config")
	// Found through the mapping; the base directory is reported as the
	// client names it (the source names the executor's file).
	if len(l) != 1 || l[0]["source"] != "project ("+proj+"/.codex/config.toml)" || l[0]["baseDir"] != "file:///workspace/.codex" {
		t.Fatalf("mapped cwd: %v", l)
	}
}

func TestTOMLWriterForms(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		// The first form that needs no escape, as codex 0.171 writes
		// them (see the differential test for more).
		{"a = 1\n[t]\nb = 'x\\y'\nc = \"q\\\"\"\nd = \"one ' and \\\"\"\n", "a = 1\n\n[t]\nb = 'x\\y'\nc = 'q\"'\nd = \"\"\"one ' and \"\"\"\"\n"},
		{"[a.b]\n[a.c]\nx = 1\n", "[a.b]\n\n[a.c]\nx = 1\n"},
		{"f = 1e3\ng = -0.0\nh = inf\ni = 0x10\n", "f = 1000.0\ng = -0.0\nh = inf\ni = 16\n"},
		{"d = 1979-05-27T07:32:00.5-07:00\ne = 07:32:00\n", "d = 1979-05-27T07:32:00.5-07:00\ne = 07:32:00\n"},
		{"x = [{a = 1}, {b = {c = 2}}]\ny = [1, [2]]\n", "y = [1, [2]]\n\n[[x]]\na = 1\n\n[[x]]\n\n[x.b]\nc = 2\n"},
		{"m = [1, {a = 1}]\n\"k y\" = \"\\u0001\"\n", "m = [1, { a = 1 }]\n\"k y\" = \"\\u0001\"\n"},
	} {
		tree, err := parseTOML(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		got := marshalTOML(tree)
		if got != tc.want {
			t.Errorf("%q:\n got %q\nwant %q", tc.in, got, tc.want)
		}
		if _, err := parseTOML(got); err != nil {
			t.Errorf("%q: output does not parse: %v", got, err)
		}
	}
}

func TestEnvironmentConfigReadLegacyManagedConfig(t *testing.T) {
	base := codexHomeEnv(t)
	proj := filepath.Join(base, "proj")
	writeFiles(t, base, map[string]string{
		"etc/managed_config.toml": "approval_policy = \"on-failure\"\napprovals_reviewer = \"auto_review\"\nsandbox_mode = \"workspace-write\"\n" +
			"[mcp_servers.m]\nurl = \"http://m\"\n[projects.\"" + proj + "\"]\ntrust_level = \"trusted\"\n",
		"proj/.git/HEAD":          "ref: refs/heads/main\n",
		"proj/.codex/config.toml": "[mcp_servers.p]\nurl = \"http://p\"\n",
	})
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	res := c.result("environmentConfig/read", map[string]any{"cwd": pathmap.URI(proj),
		"configPaths": [][]string{{"mcp_servers"}}, "requirementsPaths": [][]string{{"allowed_approval_policies"}, {"allowed_approvals_reviewers"}, {"allowed_sandbox_modes"}}})
	var sources []string
	for _, l := range layers(t, res, "config") {
		sources = append(sources, l["source"].(string))
	}
	// Trust from the managed file lets the project layer in; the managed
	// layer comes last.
	want := []string{"project (" + proj + "/.codex/config.toml)", "legacy managed_config.toml (" + base + "/etc/managed_config.toml)"}
	if strings.Join(sources, "|") != strings.Join(want, "|") {
		t.Fatalf("config layers %v, want %v", sources, want)
	}
	req := layers(t, res, "requirements")
	wantReq := "allowed_approval_policies = [\"on-request\"]\nallowed_approvals_reviewers = [\"auto_review\", \"user\"]\nallowed_sandbox_modes = [\"read-only\", \"workspace-write\"]\n"
	if len(req) != 1 || req[0]["source"] != base+"/etc/managed_config.toml" || req[0]["toml"] != wantReq {
		t.Fatalf("requirements %v", req)
	}

	writeFiles(t, base, map[string]string{"etc/managed_config.toml": "sandbox_mode = \"everything\"\n"})
	c.wantError(c.call("environmentConfig/read", configParams(proj, []string{"x"})), -32603, "Failed to parse config requirements as TOML")
}

// FuzzTOMLRoundTrip: whatever parses is written as TOML that parses back
// to the same document (written again, the same text).
func FuzzTOMLRoundTrip(f *testing.F) {
	for _, s := range []string{
		"a = 'x\\\\y'\n[t.u]\nb = \"q\\\"\"\n[[t.v]]\nc = [1, {d = 2}]\n",
		"s = \"one ' and \\\"\"\nm = \"l1\\nl2 '''\"\nk = 1979-05-27T07:32:00Z\nf = nan\n",
		"\"k y\" = { a = [[1], []], b = {} }\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tree, err := parseTOML(s)
		if err != nil {
			return
		}
		out := marshalTOML(tree)
		again, err := parseTOML(out)
		if err != nil {
			t.Fatalf("%q written as %q, which does not parse: %v", s, out, err)
		}
		if out2 := marshalTOML(again); out2 != out {
			t.Fatalf("%q written as %q, then as %q", s, out, out2)
		}
	})
}

func TestTOMLDepthIsBounded(t *testing.T) {
	for _, s := range []string{
		strings.Repeat("a.", maxTOMLDepth) + "b = 1\n",
		"a = " + strings.Repeat("{b=", maxTOMLDepth+1) + "\n",
		"a = " + strings.Repeat("[", maxTOMLDepth+1) + "\n",
		"[" + strings.Repeat("a.", maxTOMLDepth) + "b]\n",
	} {
		start := time.Now()
		_, err := parseTOML(s)
		if err == nil || !strings.Contains(err.Error(), "nest more than") {
			t.Errorf("%.40q: %v", s, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%.40q took %v", s, d)
		}
	}
	// Within the bound, and dots that are not keys', parse.
	for _, s := range []string{
		strings.Repeat("a.", maxTOMLDepth-1) + "b = 1\n",
		"f = [" + strings.Repeat("1.5, ", 1000) + "2.5]\nd = 1979-05-27T07:32:00.5Z\ns = \"a.b.c.d.e\"\n# a.b.c\n",
		"t = { a.b = 1, c = [1.5, 2.5], d = { e.f = 2 } }\n",
	} {
		if _, err := parseTOML(s); err != nil {
			t.Errorf("%.60q: %v", s, err)
		}
	}
}
