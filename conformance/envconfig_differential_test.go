package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// envTree lays out a home (codex config, skills in both user roots) and
// a trusted git project with .codex layers, under base.
func envTree(t *testing.T, base string) {
	t.Helper()
	files := map[string]string{
		"home/.codex/config.toml": `model = "gpt-5"
project_doc_max_bytes = 1000
[mcp_servers.docs]
url = "https://mcp.example/docs"
bearer_token_env_var = "DOCS_TOKEN"
[mcp_servers.local]
command = "npx"
args = ["-y", "server", 'C:\path']
env = { A = "1", "B key" = "two" }
startup_timeout_sec = 1.5
[[mcp_servers.local.tools]]
name = "t1"
[[mcp_servers.local.tools]]
name = "t2"
[mcp_servers.empty]
[mcp_servers.forms]
a = "it's \\ here"
b = "three ''' quotes \\"
c = "ends with quote\\'"
d = "ctl \u0007 \\ bs"
e = "tab\tand\\"
f = "multi\nline 'q' \\"
g = "multi\n\"dq\""
"key \"q\"" = 1
"ключ" = 2
"a.b" = 3
big = 9223372036854775807
neg = -9223372036854775808
f1 = 1e300
f2 = 5e-324
f3 = -0.0
f4 = 1.5e10
f5 = 123456.789
f6 = -nan
t1 = 00:00:00.000001
t2 = 1979-05-27 07:32:00.123456789-08:30
nest = [[{x = [{y = 1}]}], {z = []}]
h1 = 'say "hi"'
h2 = "multi\n\"x\" \\"
h3 = "multi\n\"\"\"triple"
h4 = "one ' and \""
h5 = "q\"''"
h6 = "multi\nends'"
h7 = "multi\n` + "'''" + `x\\"
h8 = "\"\"\""
h9 = "ctl\u007f"
h10 = "cr\r\nlf"
"k\\x" = 1
"k'x" = 2
"k'\"x" = 3
[[mcp_servers.forms.aot]]
[mcp_servers.forms.aot.sub]
k = "v"
[projects."` + base + `/proj"]
trust_level = "trusted"
[projects."` + base + `/badtrusted"]
trust_level = "trusted"
[projects."` + base + `/untrusted"]
trust_level = "untrusted"
`,
		"proj/.git/HEAD":                "ref: refs/heads/main\n",
		"proj/.codex/config.toml":       "model_provider = \"evil\"\nnotify = [\"x\"]\n[mcp_servers.proj]\nurl = \"http://proj\"\nwhen = 1979-05-27T07:32:00Z\nday = 1979-05-27\nmulti = \"a\\nb\"\n",
		"proj/sub/.codex/config.toml":   "[mcp_servers.docs]\nurl = \"https://override\"\n[other]\nx = nan\n",
		"proj/sub/deeper/.keep":         "",
		"untrusted/.git/HEAD":           "ref: refs/heads/main\n",
		"untrusted/.codex/config.toml":  "[mcp_servers.u]\nurl = \"http://u\"\n",
		"badproj/.git/HEAD":             "ref: refs/heads/main\n",
		"badproj/.codex/config.toml":    "[mcp_servers.b\n",
		"nogit/.codex/config.toml":      "[mcp_servers.n]\nurl = \"http://n\"\n",
		"badtrusted/.git/HEAD":          "ref: refs/heads/main\n",
		"badtrusted/.codex/config.toml": "[mcp_servers.b\n",
		"badhome/.codex/config.toml":    "x = [\n",
		"alt/config.toml":               "[mcp_servers.alt]\nurl = \"http://alt\"\n[projects.\"" + base + "/proj\"]\ntrust_level = \"untrusted\"\n",
		"alt/skills/altskill/SKILL.md":  "---\r\nname: alt\r\ndescription: from CODEX_HOME\r\n---\r\n",
		"alt/skills/long/SKILL.md":      "---\nname: " + strings.Repeat("n", 65) + "\ndescription: too long a name\n---\n",
		"alt/skills/latin1/SKILL.md":    "---\nname: latin1\ndescription: caf\xe9\n---\n",
		"alt/skills/big/SKILL.md":       "---\nname: big\ndescription: over a MiB\n---\n" + strings.Repeat("x", 1<<20),

		"home/.codex/skills/alpha/SKILL.md":              "---\nname: alpha\ndescription: \"Alpha: does   things\"\nmetadata:\n  short-description: |\n    short\n    alpha\n---\nBody\n",
		"home/.codex/skills/alpha/agents/openai.yaml":    "interface:\n  display_name: Alpha\ndependencies:\n  tools:\n    - type: mcp\n      value: deployer\n      description: Deploy   server.\n      transport: stdio\n      oauth:\n        callbackPort: 8080\n    - type: env_var\npolicy:\n  allow_implicit_invocation: false\n  products:\n    - codex\n    - CHATGPT\n",
		"home/.codex/skills/nodesc/SKILL.md":             "---\nname: nodesc\n---\n",
		"home/.codex/skills/nofront/SKILL.md":            "just text\n",
		"home/.codex/skills/colon/SKILL.md":              "---\ndescription: Build for AWS: ECS # comment\n---\n",
		"home/.codex/skills/deep/a/b/c/d/e/SKILL.md":     "---\nname: deep6\ndescription: six\n---\n",
		"home/.codex/skills/deep/a/b/c/d/e/f/SKILL.md":   "---\nname: deep7\ndescription: seven\n---\n",
		"home/.codex/skills/deep/a/b/c/d/e/f/g/SKILL.md": "---\nname: deep8\ndescription: eight\n---\n",
		"home/.codex/skills/badmeta/SKILL.md":            "---\nname: badmeta\ndescription: bad metadata\n---\n",
		"home/.codex/skills/badmeta/agents/openai.yaml":  "policy:\n  products: [bogus]\n",
		"home/.codex/skills/folded/SKILL.md":             "---\nname: '  it''s   folded '\ndescription: >-\n  one\n  two\n---\n",
		"home/.agents/skills/beta/SKILL.md":              "---\ndescription: beta from the directory name\n---\n",
		"home/.agents/skills/.hidden/SKILL.md":           "---\ndescription: in a hidden directory\n---\n",
		// Installed plugins: versions, manifests in each of the three
		// places, declared and inline MCP servers, nested namespaces.
		"home/.codex/plugins/cache/mkt/plug/1.2.0/.codex-plugin/plugin.json":     `{"name":"plug"}`,
		"home/.codex/plugins/cache/mkt/plug/1.10.0/.codex-plugin/plugin.json":    `{"name":"plug","version":"1.10.0","mcpServers":"./mcp.json"}`,
		"home/.codex/plugins/cache/mkt/plug/1.10.0/mcp.json":                     `{"mcpServers":{}}`,
		"home/.codex/plugins/cache/mkt/plug/1.10.0/skills/s1/SKILL.md":           "---\nname: s1\ndescription: plugin skill\n---\n",
		"home/.codex/plugins/cache/mkt/two/local/.claude-plugin/plugin.json":     `{"name":"two","interface":{"displayName":"Two Display"},"apps":"./apps.json"}`,
		"home/.codex/plugins/cache/mkt/two/local/apps.json":                      `{}`,
		"home/.codex/plugins/cache/mkt/two/9.0.0/.codex-plugin/plugin.json":      `{"name":"nine"}`,
		"home/.codex/plugins/cache/mkt/three/1/.codex-plugin/plugin.json":        `not json`,
		"home/.codex/plugins/cache/mkt/four/1/.keep":                             ``,
		"home/.codex/plugins/cache/mkt/bad.name/1/.codex-plugin/plugin.json":     `{"name":"x"}`,
		"home/.codex/plugins/cache/mkt/five/1/.codex-plugin/plugin.json":         `{"name":"  ","mcpServers":{"b":{"url":"http://b"}, "a":{"z":1,"y":[1, 2]}}}`,
		"home/.codex/plugins/cache/mkt/five/1/nested/.codex-plugin/plugin.json":  `{"name":"inner"}`,
		"home/.codex/plugins/cache/mkt/five/1/nested/skills/n1/SKILL.md":         "---\nname: n1\ndescription: nested\n---\n",
		"home/.codex/plugins/cache/mkt/five/1/top/t1/SKILL.md":                   "---\nname: t1\ndescription: top\n---\n",
		"home/.codex/plugins/cache/mkt/five/1/.mcp.json":                         `{}`,
		"home/.codex/plugins/cache/mkt/five/.codex-remote-plugin-install.json":   `{"schema_version":1,"remote_plugin_id":"rp_123"}`,
		"home/.codex/plugins/cache/mkt/six/2.0.0-rc.1/.codex-plugin/plugin.json": `{"name":"six-rc"}`,
		"home/.codex/plugins/cache/mkt/six/2.0.0/.codex-plugin/plugin.json":      `{"name":"six"}`,
		"home/.codex/plugins/cache/mkt/six/.codex-remote-plugin-install.json":    `{"schema_version":2,"remote_plugin_id":"x"}`,
		"home/.codex/plugins/cache/bad.mkt/p/1/.codex-plugin/plugin.json":        `{"name":"p"}`,
		"elsewhere/linked/SKILL.md":                                              "---\nname: linked\ndescription: through a directory symlink\n---\n",
		"elsewhere/file.md":                                                      "---\nname: filelink\ndescription: a symlinked SKILL.md\n---\n",
	}
	for rel, content := range files {
		p := filepath.Join(base, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{
		"home/.codex/skills/dirlink":           filepath.Join(base, "elsewhere/linked"),
		"home/.codex/skills/filelink/SKILL.md": filepath.Join(base, "elsewhere/file.md"),
		"home/.codex/skills/loop":              filepath.Join(base, "home/.codex/skills"),
	} {
		p := filepath.Join(base, link)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
}

type envCase struct {
	name, method string
	params       func(base string) any
}

func envCases() []envCase {
	uri := func(base, rel string) string { return "file://" + filepath.Join(base, rel) }
	cfg := func(rel string, configPaths, reqPaths any) func(string) any {
		return func(base string) any {
			return map[string]any{"cwd": uri(base, rel), "configPaths": configPaths, "requirementsPaths": reqPaths}
		}
	}
	mcp := [][]string{{"mcp_servers"}}
	return []envCase{
		{"status", "environment/status", func(string) any { return map[string]any{} }},
		{"status without params", "environment/status", nil},
		{"config mcp in sub", "environmentConfig/read", cfg("proj/sub/deeper", mcp, mcp)},
		{"config paths", "environmentConfig/read", cfg("proj/sub", [][]string{{"model"}, {"mcp_servers", "local", "env"}, {"mcp_servers", "docs", "url"}, {"other"}, {"projects"}}, [][]string{})},
		{"config whole-ish", "environmentConfig/read", cfg("proj", [][]string{{"mcp_servers"}, {"model_provider"}, {"notify"}, {"model"}}, [][]string{})},
		{"config untrusted", "environmentConfig/read", cfg("untrusted", mcp, mcp)},
		{"config no git", "environmentConfig/read", cfg("nogit", mcp, mcp)},
		{"config bad untrusted project", "environmentConfig/read", cfg("badproj", mcp, mcp)},
		{"config bad trusted project", "environmentConfig/read", cfg("badtrusted", mcp, mcp)},
		{"config missing cwd dir", "environmentConfig/read", cfg("nowhere/at/all", mcp, mcp)},
		{"config nothing selected", "environmentConfig/read", cfg("proj", [][]string{{"nope"}}, [][]string{{"nope"}})},
		{"config no paths", "environmentConfig/read", cfg("proj", [][]string{}, [][]string{})},
		{"config empty path", "environmentConfig/read", cfg("proj", [][]string{{}}, [][]string{})},
		{"config relative cwd", "environmentConfig/read", func(base string) any {
			return map[string]any{"cwd": "proj", "configPaths": mcp, "requirementsPaths": mcp}
		}},
		{"config missing requirementsPaths", "environmentConfig/read", func(base string) any {
			return map[string]any{"cwd": uri(base, "proj"), "configPaths": mcp}
		}},
		{"config missing cwd", "environmentConfig/read", func(base string) any { return map[string]any{"configPaths": mcp} }},
		{"discover", "capabilities/discoverV2", func(base string) any { return map[string]any{"cwd": uri(base, "proj")} }},
		{"discover missing cwd", "capabilities/discoverV2", func(string) any { return map[string]any{} }},
		{"discover sandbox: a denied skill directory", "capabilities/discoverV2", discoverSandboxed(false, "home/.codex/skills/alpha", "none")},
		{"discover sandbox: a denied skill file", "capabilities/discoverV2", discoverSandboxed(false, "home/.codex/skills/colon/SKILL.md", "none")},
		{"discover sandbox: a denied root", "capabilities/discoverV2", discoverSandboxed(false, "home/.codex/skills", "none")},
		{"discover sandbox: a denied plugin", "capabilities/discoverV2", discoverSandboxed(false, "home/.codex/plugins/cache/mkt/plug", "none")},
		{"discover sandbox: the workspace only", "capabilities/discoverV2", discoverSandboxed(true, "proj", "write")},
		{"discover sandbox: read everywhere", "capabilities/discoverV2", discoverSandboxed(false)},
		{"discover sandbox: malformed", "capabilities/discoverV2", func(base string) any {
			return map[string]any{"cwd": uri(base, "proj"), "sandbox": map[string]any{"bogus": 1}}
		}},
	}
}

// discoverSandboxed is discoverV2 under codex's fs sandbox context: read
// everywhere unless noRoot, plus entries (path relative to base, access).
func discoverSandboxed(noRoot bool, entries ...string) func(base string) any {
	return func(base string) any {
		es := []any{}
		if !noRoot {
			es = append(es, map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"})
		}
		for i := 0; i+1 < len(entries); i += 2 {
			es = append(es, map[string]any{"path": map[string]any{"type": "path", "path": "file://" + filepath.Join(base, entries[i])}, "access": entries[i+1]})
		}
		return map[string]any{"cwd": "file://" + filepath.Join(base, "proj"), "sandbox": map[string]any{
			"permissions": map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": es}, "network": "restricted"},
			"cwd":         "file://" + filepath.Join(base, "proj"), "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false, "useLegacyLandlock": false,
		}}
	}
}

// envNormalize hides what differs between runs and machines: the
// temporary base, the home, the host name.
func envNormalize(base, home string, m map[string]any) string {
	if r, ok := m["result"].(map[string]any); ok {
		if _, ok := r["hostname"]; ok {
			r["hostname"] = "$HOST"
		}
	}
	// outpost adds the error's kind as data; codex sends none.
	if e, ok := m["error"].(map[string]any); ok {
		delete(e, "data")
	}
	delete(m, "id")
	delete(m, "jsonrpc")
	b, _ := json.Marshal(m)
	s := strings.ReplaceAll(string(b), base, "$BASE")
	return s
}

// TestDifferentialEnvConfigAgainstCodexExecServer runs environment/status,
// environmentConfig/read and capabilities/discoverV2 over the same trees
// against outpost's executor and codex 0.171's exec-server, each with
// HOME pointing into the tree: layers (sources, base dirs, serialized
// TOML), trust, skills, warnings, error codes and messages must agree.
// Parse-error messages come from different TOML parsers: only their code
// and the file they name are compared.
func TestDifferentialEnvConfigAgainstCodexExecServer(t *testing.T) {
	codexBin, err := peers.CodexBinary()
	if err != nil {
		testdeps.Missing(t, "codex", "skipping the environment differential test: %v", err)
	}
	bin := outpostBinary(t)
	run := func(who, variant string) []observation {
		base, err := os.MkdirTemp("/var/tmp", "outpost-envdiff-")
		if err != nil {
			t.Fatalf("no directory outside /tmp: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		if base, err = filepath.EvalSymlinks(base); err != nil {
			t.Fatal(err)
		}
		envTree(t, base)
		home := filepath.Join(base, "home")
		env := []string{"HOME=" + home, "CODEX_HOME="}
		switch variant {
		case "CODEX_HOME":
			env[1] = "CODEX_HOME=" + filepath.Join(base, "alt")
		case "bad user config":
			home = filepath.Join(base, "badhome")
			env[0] = "HOME=" + home
		}
		ctx, cancel := context.WithTimeout(context.Background(), stepTimeout)
		defer cancel()
		var srv *peers.Server
		if who == "outpost" {
			srv, err = peers.StartOutpost(ctx, bin, env...)
		} else {
			srv, err = peers.StartCodex(ctx, codexBin, env...)
		}
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Stop()
		w := dial(t, srv.URL)
		// Before initialize: the lifecycle refusal.
		pre := []observation{{"status before initialize", envNormalize(base, home, w.call("environment/status", map[string]any{}))}}
		w.call("initialize", map[string]any{"clientName": "env-diff"})
		w.notify("initialized")
		obs := pre
		for _, c := range envCases() {
			var p any
			if c.params != nil {
				p = c.params(base)
			}
			r := w.call(c.method, p)
			obs = append(obs, observation{c.name, envNormalize(base, home, r)})
		}
		return obs
	}
	for _, variant := range []string{"HOME", "CODEX_HOME", "bad user config"} {
		t.Run(variant, func(t *testing.T) { compareEnv(t, run("outpost", variant), run("codex", variant)) })
	}
}

func compareEnv(t *testing.T, a, b []observation) {
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		av, bv := a[i].value, b[i].value
		if strings.Contains(a[i].value, "parse") || strings.Contains(a[i].value, "failed to load") {
			av, bv = parseErrorShape(av), parseErrorShape(bv)
		}
		if strings.HasSuffix(a[i].step, "malformed") {
			// Different policy parsers: the code must agree.
			av, bv = errorCode(av), errorCode(bv)
		}
		if av != bv {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, a[i].value, b[i].value)
		} else {
			t.Logf("%s: %s", a[i].step, a[i].value)
		}
	}
}

// parseErrorShape keeps a TOML parse error's code and the text before
// the parser's own words (which name the file).
func parseErrorShape(s string) string {
	if i := strings.Index(s, ".toml"); i >= 0 && strings.Contains(s, `"error"`) {
		return s[:i+len(".toml")]
	}
	return s
}

// errorCode keeps only an error reply's code.
func errorCode(s string) string {
	var m map[string]any
	if json.Unmarshal([]byte(s), &m) != nil {
		return s
	}
	if e, ok := m["error"].(map[string]any); ok {
		return fmt.Sprint("error ", e["code"])
	}
	return s
}
