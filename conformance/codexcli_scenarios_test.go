package conformance

// The codex CLI cases that compare: each runs one `codex exec` turn and
// returns what it observed, which against outpost must equal what it
// observed against codex's own exec-server of the same release. Each also
// checks what must hold against any server, so a reference that stops
// showing the behaviour (a codex release that drops it) fails loudly
// instead of comparing nothing with nothing.

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/fakemodel"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// envTroubleRE matches the lines codex writes to stderr when the
// exec-server does not satisfy it. codex keeps going after these, quietly
// doing less (no skills, no AGENTS.md, a tool call refused), which is the
// silent degradation this check exists to catch. Collected from codex
// 0.145–0.171 against servers lacking a method (fs/walk before outpost
// had it), answering one with an error, or not describing the
// environment (OUTPOST_CODEXCLI_FAULTS reproduces each):
//
//	ERROR codex_skills_extension::loader::host: failed to walk skills root file:///…/.agents/skills: method `fs/walk` is not implemented by this executor
//	ERROR codex_core::agents_md: error trying to find AGENTS.md docs: method not found: fs/getMetadata environment_id="remote"
//	ERROR codex_core::tools::router: error=No usable execution environment is available. …
//
// and from the brief of this work: "failed to get info for environment",
// "invalid URI". A tracing ERROR or WARN line that names the
// environment, an executor or the exec-server counts too.
var envTroubleRE = regexp.MustCompile(`(?i)` + strings.Join([]string{
	`failed to get info for environment`,
	`invalid uri`,
	`no usable execution environment`,
	`method not found`,
	`not implemented by this executor`,
	`failed to walk skills root`,
	`error trying to find agents\.md`,
	`unknown variant`,
	`missing field`,
	`-3260[12]\b`,
	`\b(?:error|warn)\b.*(?:environment_id=|exec.?server|executor|environment)`,
}, "|"))

// envTrouble returns codex's stderr lines that tell of trouble with the
// execution environment.
func envTrouble(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if envTroubleRE.MatchString(l) {
			out = append(out, strings.TrimSpace(l))
		}
	}
	return out
}

// codexQuietStderr: a plain command turn leaves nothing on codex's stderr
// about the environment (runCodexExec checks every run; this case is the
// one row of the matrix that does nothing else).
func codexQuietStderr(t *testing.T, srv execServer) observations {
	ws := t.TempDir()
	marker := "quiet-" + randomTag()
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: "echo " + marker}},
	})
	out := onlyOutput(t, res, 1)[0]
	if !out.Exited || out.ExitCode != 0 || !strings.Contains(out.Output, marker) {
		t.Errorf("the command did not run cleanly: %s", &out)
	}
	return observations{"environment trouble on stderr": strings.Join(envTrouble(res.Stderr), " | ")}
}

// codexExecutorShell: the command codex starts runs in the executor's
// login shell (which the test made differ from its own), as with codex's
// own server. Seen twice: the argv codex sent in process/start, and the
// shell's own command line as /proc shows it.
func codexExecutorShell(t *testing.T, srv execServer) observations {
	ws := t.TempDir()
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{
		{Exec: &fakemodel.ExecCall{Cmd: `printf 'cmdline='; tr '\0' ' ' < /proc/$$/cmdline; echo`}},
	})
	out := onlyOutput(t, res, 1)[0]
	starts := res.Wire.Requests("process/start")
	if len(starts) != 1 {
		t.Fatalf("codex sent %d process/start requests, want 1", len(starts))
	}
	argv, _ := starts[0]["argv"].([]any)
	if len(argv) < 2 {
		t.Fatalf("process/start argv %v: want a shell and its arguments", starts[0]["argv"])
	}
	// The shell and its options, not the command text.
	var head []string
	for _, a := range argv[:len(argv)-1] {
		head = append(head, fmt.Sprint(a))
	}
	line := regexp.MustCompile(`cmdline=(\S+)`).FindStringSubmatch(out.Output)
	if line == nil {
		t.Fatalf("the command did not print its shell: %s", &out)
	}
	if srv.host.shell.passwd != "" && head[0] != srv.host.shell.path {
		t.Errorf("codex ran %q, not in the executor's login shell %s (the test's own is %s)", head, srv.host.shell.path, srv.host.shell.own)
	}
	if line[1] != head[0] {
		t.Errorf("the command ran in %s, but codex asked for %s", line[1], head[0])
	}
	return observations{"shell argv": strings.Join(head, " "), "running shell": line[1]}
}

// codexExecutorLoginShell: as executor-shell, on an executor whose
// environment has no SHELL (a service started by systemd or cron): codex's
// own server still reports the user's login shell (from the password
// database), so the command must start in it. It gets a server of its
// own, started without SHELL; through the bridge it is the same executor
// code, so that row only runs the shared ones.
func codexExecutorLoginShell(t *testing.T, srv execServer) observations {
	if srv.another == nil {
		t.Skip("no separate executor for this server kind; see the outpost row")
	}
	if srv.host.shell.passwd == "" {
		testdeps.Missing(t, "userns", "no mount namespace to give the executor a login shell of its own")
	}
	host := newExecutorHost(t, srv.host.shell)
	host.env = append(host.env, "SHELL=") // an empty SHELL is no SHELL, to both servers
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := srv.another(ctx, host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	alone := srv
	alone.url, alone.pid, alone.host = s.URL, s.Pid(), host
	return codexExecutorShell(t, alone)
}

// codexSkills: a repository skill in the workspace
// (.agents/skills/NAME/SKILL.md) is listed in what codex sends the model,
// as often as with codex's own server. codex finds it through the
// exec-server's fs/* (fs/walk from 0.171).
func codexSkills(t *testing.T, srv execServer) observations {
	ws := t.TempDir()
	gitInit(t, ws)
	name := "outpost-probe-" + randomTag()
	skill := filepath.Join(ws, ".agents", "skills", name, "SKILL.md")
	if err := os.MkdirAll(filepath.Dir(skill), 0o755); err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf("---\nname: %s\ndescription: Probe skill %s for the outpost conformance test.\n---\n\nSay hello.\n", name, name)
	if err := os.WriteFile(skill, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{{Say: "done"}})
	if len(res.Requests) == 0 {
		t.Fatal("codex sent the model nothing")
	}
	n := strings.Count(string(res.Requests[0].Raw), name)
	t.Logf("the skill's name appears %d times in the first model request; fs methods: %v", n, fsMethods(res.Wire))
	if n == 0 {
		t.Errorf("codex did not tell the model of the workspace's skill %s (exec-server methods %v)", name, res.Wire.Methods())
	}
	return observations{"skill mentions in the prompt": strconv.Itoa(n)}
}

// fsMethods lists the fs/* methods codex called, with counts.
func fsMethods(tap *wireTap) string {
	var s []string
	for m, n := range tap.Methods() {
		if strings.HasPrefix(m, "fs/") {
			s = append(s, fmt.Sprintf("%s×%d", m, n))
		}
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func gitInit(t *testing.T, dir string) {
	t.Helper()
	if out, err := exec.Command("git", "init", "-q", dir).CombinedOutput(); err != nil {
		t.Logf("git init: %v: %s; making .git by hand", err, out)
		if err := os.Mkdir(filepath.Join(dir, ".git"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

// codexApplyPatch: the model calls apply_patch (codex applies it through
// the exec-server's fs/*), adding, updating and deleting files; the
// workspace ends up as the patch says, and as with codex's own server,
// and the model is told the same.
func codexApplyPatch(t *testing.T, srv execServer) observations {
	ws := t.TempDir()
	gitInit(t, ws)
	for name, body := range map[string]string{"keep.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n"} {
		if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	patch := strings.Join([]string{
		"*** Begin Patch",
		"*** Add File: sub/added.txt",
		"+fresh",
		"+lines",
		"*** Update File: keep.txt",
		"@@",
		" one",
		"-two",
		"+TWO",
		" three",
		"*** Delete File: gone.txt",
		"*** End Patch",
	}, "\n")
	res := runCodexExec(t, srv, ws, []string{"-s", "workspace-write", "-m", "gpt-5.5"}, []fakemodel.Step{{Patch: patch}})
	out := onlyOutput(t, res, 1)[0]
	tree := treeOf(t, ws)
	want := "gone.txt: <absent>\nkeep.txt: \"one\\nTWO\\nthree\\n\"\nsub/added.txt: \"fresh\\nlines\\n\"\n"
	if tree != want {
		t.Errorf("after apply_patch the workspace is\n%s\nwant\n%s\ntool output: %s", tree, want, &out)
	}
	text := wallTimeRE.ReplaceAllString(strings.ReplaceAll(out.Text, ws, "<ws>"), "")
	return observations{"workspace after the patch": tree, "apply_patch output": text}
}

// wallTimeRE matches the line of a tool output that says how long it took.
var wallTimeRE = regexp.MustCompile(`(?m)^Wall time: .*\n`)

// treeOf lists the workspace's files (outside .git) and contents, and
// says which of the patch's files are absent.
func treeOf(t *testing.T, ws string) string {
	t.Helper()
	seen := map[string]string{}
	filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(ws, p)
			b, _ := os.ReadFile(p)
			seen[rel] = strconv.Quote(string(b))
		}
		return nil
	})
	for _, p := range []string{"gone.txt", "keep.txt", "sub/added.txt"} {
		if _, ok := seen[p]; !ok {
			seen[p] = "<absent>"
		}
	}
	keys := make([]string, 0, len(seen))
	for k := range seen {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	for _, k := range keys {
		fmt.Fprintf(&b, "%s: %s\n", k, seen[k])
	}
	return b.String()
}

// codexMCPEnvironmentConfig: the executor's CODEX_HOME names an HTTP MCP
// server (executorHost). codex 0.158+ reads it with environmentConfig/read
// when the executor advertises environmentConfigRead, connects to it and
// offers its tool to the model. Observed: whether codex read the
// executor's config, how it reached the MCP server (http/request through
// the exec-server, or not at all), whether the server was reached, and
// whether its tool was offered.
func codexMCPEnvironmentConfig(t *testing.T, srv execServer) observations {
	ws := t.TempDir()
	before := srv.host.mcp.Calls()
	res := runCodexExec(t, srv, ws, []string{"--dangerously-bypass-approvals-and-sandbox"}, []fakemodel.Step{{Say: "done"}})
	if len(res.Requests) == 0 {
		t.Fatal("codex sent the model nothing")
	}
	var offered []string
	for name := range fakemodel.ToolKinds(res.Requests[0].Body) {
		if strings.Contains(name, srv.host.mcp.tag) {
			offered = append(offered, strings.ReplaceAll(name, srv.host.mcp.tag, "TAG"))
		}
	}
	sort.Strings(offered)
	after := srv.host.mcp.Calls()
	var reached []string
	for m, n := range after {
		if n > before[m] {
			reached = append(reached, m)
		}
	}
	sort.Strings(reached)
	methods := res.Wire.Methods()
	if methods["environmentConfig/read"] > 0 && len(offered) == 0 {
		t.Errorf("codex read the executor's config but offered the model no tool of its MCP server (the server got %v)", reached)
	}
	return observations{
		"environmentConfig/read calls":   strconv.Itoa(methods["environmentConfig/read"]),
		"http/request calls > 0":         strconv.FormatBool(methods["http/request"] > 0),
		"MCP methods the server got":     strings.Join(reached, " "),
		"MCP tools offered to the model": strings.Join(offered, " "),
	}
}
