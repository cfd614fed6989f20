//go:build linux || darwin || freebsd

package executor

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/outpost-exec/outpost/pathmap"
)

func discover(t *testing.T, c *rawClient, cwd string) (names []string, res map[string]any) {
	t.Helper()
	res = c.result("capabilities/discoverV2", map[string]any{"cwd": pathmap.URI(cwd)})
	for _, s := range res["skills"].([]any) {
		names = append(names, s.(map[string]any)["name"].(string))
	}
	return names, res
}

func warnings(res map[string]any) []string {
	var out []string
	for _, w := range res["warnings"].([]any) {
		out = append(out, w.(string))
	}
	return out
}

func TestDiscoverV2SkillsFromTheThreeRootsWithMetadata(t *testing.T) {
	base := codexHomeEnv(t)
	writeFiles(t, base, map[string]string{
		"home/.codex/skills/b/SKILL.md": "---\nname: bee\ndescription: \"  B:   two \"\nmetadata:\n  short-description: |\n    short\n    b\n---\nbody\n",
		"home/.codex/skills/b/agents/openai.yaml": "dependencies:\n  tools:\n    - type: mcp\n      value: srv\n      url: http://x\n" +
			"      oauth:\n        callback_port: 99\n    - value: no-type\npolicy:\n  allow_implicit_invocation: true\n  products: [codex, ATLAS]\n",
		"home/.codex/skills/a/SKILL.md":    "---\ndescription: named after its directory\n---\n",
		"home/.agents/skills/u/SKILL.md":   "---\nname: user\ndescription: u\n---\n",
		"etc/skills/s/SKILL.md":            "---\nname: sys\ndescription: s\n---\n",
		"proj/.agents/skills/p/SKILL.md":   "---\nname: project\ndescription: not read by codex 0.171\n---\n",
		"home/.codex/skills/bad/SKILL.md":  "---\nname: bad\n---\n",
		"home/.codex/skills/bad2/SKILL.md": "no front matter",
	})
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.wantError(c.call("capabilities/discoverV2", map[string]any{"cwd": pathmap.URI(base)}), -32600, "before using capability discovery methods")
	c.init()
	c.wantError(c.call("capabilities/discoverV2", map[string]any{}), -32602, "missing field `cwd`")

	names, res := discover(t, c, filepath.Join(base, "proj"))
	if want := []string{"a", "bee", "user", "sys"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("skills %v, want %v", names, want)
	}
	b := res["skills"].([]any)[1].(map[string]any)
	if b["description"] != "B: two" || b["shortDescription"] != "short b" || b["path"] != pathmap.URI(base+"/home/.codex/skills/b/SKILL.md") {
		t.Fatalf("skill b: %v", b)
	}
	root := b["discoveryRoot"].(map[string]any)
	if root["id"] != "codex-home-skills" || root["path"] != pathmap.URI(base+"/home/.codex/skills") {
		t.Fatalf("root %v", root)
	}
	tools := b["dependencies"].(map[string]any)["tools"].([]any)
	if len(tools) != 1 || fmt.Sprint(tools[0]) != "map[command:<nil> description:<nil> oauthCallbackPort:99 transport:<nil> type:mcp url:http://x value:srv]" {
		t.Fatalf("tools %v", tools)
	}
	if fmt.Sprint(b["policy"]) != "map[allowImplicitInvocation:true products:[codex atlas]]" {
		t.Fatalf("policy %v", b["policy"])
	}
	ids := []string{}
	for _, s := range res["skills"].([]any) {
		ids = append(ids, s.(map[string]any)["discoveryRoot"].(map[string]any)["id"].(string))
	}
	if want := []string{"codex-home-skills", "codex-home-skills", "user-agent-skills", "system-skills"}; !reflect.DeepEqual(ids, want) {
		t.Fatalf("roots %v", ids)
	}
	if w := warnings(res); len(w) != 1 || w[0] != warnIncomplete {
		t.Fatalf("warnings %v: the two invalid skills' root adds one", w)
	}
	if p := res["plugins"].([]any); len(p) != 0 {
		t.Fatalf("plugins %v", p)
	}
}

func TestDiscoverV2WalkIsBoundedAndSafe(t *testing.T) {
	base := codexHomeEnv(t)
	skills := filepath.Join(base, "home/.codex/skills")
	hidden := filepath.Join(base, "secret")
	writeFiles(t, base, map[string]string{
		"home/.codex/skills/ok/SKILL.md": "---\nname: ok\ndescription: d\n---\n",
		"secret/s/SKILL.md":              "---\nname: secret\ndescription: hidden\n---\n",
		"elsewhere/SKILL.md":             "---\nname: filelink\ndescription: d\n---\n",
	})
	for link, target := range map[string]string{
		"loop":       skills,                                    // a cycle: entered once
		"secret":     hidden,                                    // into a hidden path: not entered
		"f/SKILL.md": filepath.Join(base, "elsewhere/SKILL.md"), // a symlinked SKILL.md is no skill
	} {
		p := filepath.Join(skills, link)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.Symlink(target, p); err != nil {
			t.Fatal(err)
		}
	}
	// A FIFO named SKILL.md is not opened (it would block a reader).
	os.MkdirAll(filepath.Join(skills, "fifo"), 0o755)
	if err := syscall.Mkfifo(filepath.Join(skills, "fifo/SKILL.md"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Too deep: the walk reads directories maxSkillDepth below the root.
	deep := filepath.Join(skills, "d1/d2/d3/d4/d5/d6/d7")
	writeFiles(t, deep, map[string]string{"SKILL.md": "---\nname: toodeep\ndescription: d\n---\n"})
	writeFiles(t, filepath.Dir(deep), map[string]string{"SKILL.md": "---\nname: deepest\ndescription: d\n---\n"})

	ts := newTestServer(t, func(cfg *Config) { cfg.SandboxHidden = append(cfg.SandboxHidden, hidden) }, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	names, res := discover(t, c, base)
	if want := []string{"deepest", "ok"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("skills %v, want %v", names, want)
	}
	if w := warnings(res); len(w) != 0 {
		t.Fatalf("warnings %v", w)
	}

	// More directories than a root's bound: the walk stops and says so.
	for i := 0; i < maxSkillDirs; i++ {
		if err := os.Mkdir(filepath.Join(skills, fmt.Sprintf("many%04d", i)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, skills, map[string]string{"zzz/SKILL.md": "---\nname: late\ndescription: d\n---\n"})
	names, res = discover(t, c, base)
	if strings.Contains(strings.Join(names, ","), "late") || len(warnings(res)) != 1 {
		t.Fatalf("past the directory bound: skills %v, warnings %v", names, warnings(res))
	}
}

func TestSkillFrontMatterParsing(t *testing.T) {
	for _, tc := range []struct{ in, name, desc, err string }{
		{"---\nname: x\ndescription: y\n---\n", "x", "y", ""},
		{"---\r\nname: x\r\ndescription: y\r\n---\r\n", "x", "y", ""},
		{"---\ndescription: a: b # c\n---\n", "dir", "a: b", ""},
		{"---\nname: 'it''s'\ndescription: \"tab\\tnl\\n\"\n---\n", "it's", "tab nl", ""},
		{"---\ndescription: >\n  folded\n  lines\n\n---\n", "dir", "folded lines", ""},
		{"---\ndescription: plain\n  continued\n---\n", "dir", "plain continued", ""},
		{"---\nname: " + strings.Repeat("n", 65) + "\ndescription: d\n---\n", "", "", "too long"},
		{"---\nname: x\n---\n", "", "", "description"},
		{"---\n---\n", "", "", "frontmatter"},
		{"---\nname: x\ndescription: y\n", "", "", "frontmatter"},
		{"---\ndescription: \"open\n---\n", "", "", "YAML"},
		{"---\ndescription: y\ndescription: z\n---\n", "", "", "duplicate"},
		{"---\n\tdescription: y\n---\n", "", "", "tab"},
		{"---\ndescription: true\n---\n", "", "", "boolean"},
	} {
		s, err := parseSkill(tc.in, "/skills/dir/SKILL.md")
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: err %v, want %q", tc.in, err, tc.err)
			}
			continue
		}
		if err != nil || s.Name != tc.name || s.Description != tc.desc {
			t.Errorf("%q: %+v %v, want %q %q", tc.in, s, err, tc.name, tc.desc)
		}
	}
}

func TestDiscoverV2InstalledPlugins(t *testing.T) {
	base := codexHomeEnv(t)
	cache := "home/.codex/plugins/cache/"
	writeFiles(t, base, map[string]string{
		cache + "m/a/1.2.0/.codex-plugin/plugin.json":       `{"name":"old"}`,
		cache + "m/a/1.10.0/.codex-plugin/plugin.json":      `{"name":"a","interface":{"displayName":"A!"},"mcpServers":"./servers.json","apps":"../escape.json"}`,
		cache + "m/a/1.10.0/servers.json":                   `{"mcpServers":{}}`,
		cache + "m/a/1.10.0/skills/s/SKILL.md":              "---\nname: s\ndescription: d\n---\n",
		cache + "m/a/1.10.0/sub/.cursor-plugin/plugin.json": `{"name":"inner"}`,
		cache + "m/a/1.10.0/sub/t/SKILL.md":                 "---\nname: t\ndescription: d\n---\n",
		cache + "m/a/1.10.0-rc.1/.codex-plugin/plugin.json": `{"name":"rc"}`,
		cache + "m/a/.codex-remote-plugin-install.json":     `{"schema_version":1,"remote_plugin_id":"rp_1"}`,
		cache + "m/b/local/.claude-plugin/plugin.json":      `{"mcpServers":{"z":{"url":"u"},"y":{}}}`,
		cache + "m/b/9.9.9/.codex-plugin/plugin.json":       `{"name":"nine"}`,
		cache + "m/nomanifest/1/.keep":                      ``,
		cache + "bad.market/c/1/.codex-plugin/plugin.json":  `{"name":"c"}`,
	})
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	_, res := discover(t, c, base)
	var got []string
	for _, p := range res["plugins"].([]any) {
		p := p.(map[string]any)
		files := p["files"].(map[string]any)
		var skills []string
		for _, s := range p["skills"].([]any) {
			skills = append(skills, s.(map[string]any)["name"].(string))
		}
		mcp, _ := files["mcpConfig"].(map[string]any)
		got = append(got, fmt.Sprintf("%s %s %s %v mcp=%v apps=%v skills=%v", p["id"], p["displayName"], p["version"], p["remotePluginId"],
			mcp["contents"], files["appsConfig"], skills))
	}
	want := []string{
		"a@m A! 1.10.0 rp_1 mcp={\"mcpServers\":{}} apps=<nil> skills=[a:s inner:t]",
		"b@m local local <nil> mcp={\"z\":{\"url\":\"u\"},\"y\":{}} apps=<nil> skills=[]",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("plugins\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if w := warnings(res); len(w) != 1 || w[0] != warnIncomplete {
		t.Fatalf("warnings %v: the package without a manifest adds one", w)
	}
}

func TestDiscoverV2ResponseIsBoundedInCapabilities(t *testing.T) {
	base := codexHomeEnv(t)
	files := map[string]string{}
	for i := 0; i < 1500; i++ {
		files[fmt.Sprintf("home/.codex/skills/s%04d/SKILL.md", i)] = "---\ndescription: d\n---\n"
	}
	for i := 0; i < 600; i++ {
		files[fmt.Sprintf("home/.agents/skills/u%04d/SKILL.md", i)] = "---\ndescription: d\n---\n"
	}
	writeFiles(t, base, files)
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	names, res := discover(t, c, base)
	if len(names) != maxCapabilities || names[len(names)-1] != fmt.Sprintf("u%04d", maxCapabilities-1500-1) {
		t.Fatalf("%d skills (last %s), want the first %d", len(names), names[len(names)-1], maxCapabilities)
	}
	if w := warnings(res); len(w) != 1 || w[0] != warnSizeLimit {
		t.Fatalf("warnings %v", w)
	}
}

func TestPluginVersionOrder(t *testing.T) {
	vs := []string{"1.10.0", "1.2.0", "2.0.0-rc.1", "2.0.0", "2.0.0-alpha", "2.0.0-alpha.10", "2.0.0-alpha.2", "abc", "0.9"}
	slices.SortFunc(vs, compareVersions)
	want := []string{"0.9", "1.2.0", "1.10.0", "2.0.0-alpha", "2.0.0-alpha.2", "2.0.0-alpha.10", "2.0.0-rc.1", "2.0.0", "abc"}
	if !reflect.DeepEqual(vs, want) {
		t.Fatalf("%v\nwant %v", vs, want)
	}
}

// sandboxContext is codex's fs sandbox context: read everywhere unless
// noRoot, plus (path, access) entries.
func sandboxContext(cwd string, noRoot bool, entries ...string) map[string]any {
	es := []any{}
	if !noRoot {
		es = append(es, map[string]any{"path": map[string]any{"type": "special", "value": map[string]any{"kind": "root"}}, "access": "read"})
	}
	for i := 0; i+1 < len(entries); i += 2 {
		es = append(es, map[string]any{"path": map[string]any{"type": "path", "path": pathmap.URI(entries[i])}, "access": entries[i+1]})
	}
	return map[string]any{
		"permissions": map[string]any{"type": "managed", "file_system": map[string]any{"type": "restricted", "entries": es}, "network": "restricted"},
		"cwd":         pathmap.URI(cwd), "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": false, "useLegacyLandlock": false,
	}
}

func TestDiscoverV2HonoursTheSandbox(t *testing.T) {
	base := codexHomeEnv(t)
	skills := filepath.Join(base, "home/.codex/skills")
	writeFiles(t, base, map[string]string{
		"home/.codex/skills/a/SKILL.md":  "---\nname: a\ndescription: d\n---\n",
		"home/.codex/skills/b/SKILL.md":  "---\nname: b\ndescription: d\n---\n",
		"home/.agents/skills/c/SKILL.md": "---\nname: c\ndescription: d\n---\n",
		"ws/.keep":                       "",
	})
	ws := filepath.Join(base, "ws")
	ts := newTestServer(t, nil, WSConfig{})
	c := dialRaw(t, ts.url, nil)
	c.init()
	call := func(sb map[string]any) ([]string, []string) {
		t.Helper()
		res := c.result("capabilities/discoverV2", map[string]any{"cwd": pathmap.URI(ws), "sandbox": sb})
		var names []string
		for _, s := range res["skills"].([]any) {
			names = append(names, s.(map[string]any)["name"].(string))
		}
		return names, warnings(res)
	}
	for _, tc := range []struct {
		name     string
		sb       map[string]any
		skills   string
		warnings int
	}{
		{"read everywhere", sandboxContext(ws, false), "a b c", 0},
		{"a denied skill", sandboxContext(ws, false, filepath.Join(skills, "b"), "none"), "a c", 1},
		{"a denied SKILL.md", sandboxContext(ws, false, filepath.Join(skills, "a/SKILL.md"), "none"), "b c", 1},
		{"a denied root", sandboxContext(ws, false, skills, "none"), "c", 1},
		{"the workspace only", sandboxContext(ws, true, ws, "write"), "", 0},
	} {
		names, w := call(tc.sb)
		if strings.Join(names, " ") != tc.skills || len(w) != tc.warnings {
			t.Errorf("%s: skills %v warnings %v, want %q and %d warnings", tc.name, names, w, tc.skills, tc.warnings)
		}
	}
	m := c.call("capabilities/discoverV2", map[string]any{"cwd": pathmap.URI(ws), "sandbox": map[string]any{"bogus": 1}})
	c.wantError(m, -32602, "invalid params for capabilities/discoverV2: sandbox")
}

// FuzzSkillMetadata: no input panics or hangs the YAML reader.
func FuzzSkillMetadata(f *testing.F) {
	for _, s := range []string{
		"---\nname: x\ndescription: y\nmetadata:\n  short-description: |\n    a\n---\n",
		"dependencies:\n  tools:\n    - type: mcp\n      value: v\n      oauth: {callbackPort: 1}\npolicy:\n  products: [codex]\n",
		"a: [1, {b: 'c', d: \"e\\u0041\"}]\n- x\n  - y: >-\n    z\n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		parseSkill(s, "/skills/x/SKILL.md")
		parseSkillMetadata(s)
	})
}
