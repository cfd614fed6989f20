package conformance

import (
	"encoding/base64"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// codexSandbox is the sandbox object codex 0.145 sends for -s read-only
// and -s workspace-write (captured from the real client), for workspace ws.
func codexSandbox(mode, ws string) map[string]any {
	special := func(kind, sub, access string) map[string]any {
		v := map[string]any{"kind": kind}
		if sub != "" {
			v["subpath"] = sub
		}
		return map[string]any{"path": map[string]any{"type": "special", "value": v}, "access": access}
	}
	entries := []any{special("root", "", "read")}
	if mode == "workspace-write" {
		entries = append(entries, special("project_roots", "", "write"), special("slash_tmp", "", "write"), special("tmpdir", "", "write"),
			special("project_roots", ".git", "read"), special("project_roots", ".agents", "read"), special("project_roots", ".codex", "read"))
	}
	return map[string]any{
		"permissions": map[string]any{"type": "managed",
			"file_system": map[string]any{"type": "restricted", "entries": entries}, "network": "restricted"},
		"cwd": "file://" + ws, "workspaceRoots": []string{"file://" + ws},
		"windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": true, "useLegacyLandlock": false,
	}
}

// sandboxCase is one sandboxed command of the comparison.
type sandboxCase struct {
	name, mode, script string
}

// TestDifferentialSandboxAgainstCodexExecServer sends codex's own sandbox
// objects to codex's exec-server and to outpost's and compares exit code,
// sandboxDenied and stdout. outpost is deliberately stricter in ways this
// comparison does not reach (protected names at any depth, the executor's
// secrets hidden, an unprivileged user when root); where the two differ on
// a case below, the test fails.
func TestDifferentialSandboxAgainstCodexExecServer(t *testing.T) {
	ours, theirs := bothServers(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port

	run := func(url string) []observation {
		// A workspace and an "outside" directory away from /tmp, which
		// workspace-write leaves writable.
		base, err := os.MkdirTemp("/var/tmp", "outpost-sbdiff-")
		if err != nil {
			t.Fatalf("no directory outside /tmp: %v", err)
		}
		t.Cleanup(func() { os.RemoveAll(base) })
		os.Chmod(base, 0o755) // like /srv: the sandbox's user may look around
		ws, out := filepath.Join(base, "ws"), filepath.Join(base, "outside")
		os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
		os.Mkdir(out, 0o755)
		os.WriteFile(filepath.Join(ws, "existing.txt"), []byte("readable\n"), 0o644)
		os.WriteFile(filepath.Join(ws, ".git", "config"), []byte("[core]\n"), 0o644)
		cases := []sandboxCase{}
		for _, mode := range []string{"read-only", "workspace-write"} {
			cases = append(cases,
				sandboxCase{mode + ": write inside", mode, "echo x > in.txt && echo wrote"},
				sandboxCase{mode + ": write outside", mode, "echo x > " + out + "/o.txt && echo wrote"},
				sandboxCase{mode + ": write into .git", mode, "echo x >> .git/config && echo wrote"},
				sandboxCase{mode + ": read", mode, "cat existing.txt"},
				sandboxCase{mode + ": tcp connect, network restricted", mode, fmt.Sprintf("echo > /dev/tcp/127.0.0.1/%d && echo connected", port)},
			)
		}
		w := dial(t, url)
		w.call("initialize", map[string]any{"clientName": "sandbox-diff"})
		w.notify("initialized")
		var obs []observation
		for i, c := range cases {
			pid := fmt.Sprintf("s%d", i)
			p := map[string]any{"processId": pid, "argv": []string{"/bin/bash", "-c", c.script}, "cwd": "file://" + ws,
				"env": map[string]string{"PATH": "/usr/bin:/bin"}, "tty": false, "sandbox": codexSandbox(c.mode, ws)}
			if r := w.call("process/start", p); r["error"] != nil {
				obs = append(obs, observation{c.name, "start: " + shape(r)})
				continue
			}
			notes := w.untilClosed(pid)
			stdout, exit, denied := "", "none", "none"
			for _, m := range notes {
				pm := params(m)
				switch m["method"] {
				case "process/output":
					if pm["stream"] == "stdout" {
						stdout += decodeChunk(pm["chunk"])
					}
				case "process/exited":
					exit, denied = fmt.Sprint(pm["exitCode"]), fmt.Sprint(pm["sandboxDenied"] == true)
				}
			}
			obs = append(obs, observation{c.name, fmt.Sprintf("exit=%s denied=%s stdout=%q", exit, denied, stdout)})
		}
		// What landed on disk, too.
		for _, p := range []string{filepath.Join(ws, "in.txt"), filepath.Join(out, "o.txt")} {
			_, err := os.Stat(p)
			obs = append(obs, observation{"exists " + strings.TrimPrefix(p, base), fmt.Sprint(err == nil)})
		}
		b, _ := os.ReadFile(filepath.Join(ws, ".git", "config"))
		obs = append(obs, observation{".git/config unchanged", fmt.Sprint(string(b) == "[core]\n")})
		return obs
	}
	a, b := run(ours.URL), run(theirs.URL)
	if len(a) != len(b) {
		t.Fatalf("outpost made %d observations, codex %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Errorf("%s:\n  outpost: %s\n  codex:   %s", a[i].step, a[i].value, b[i].value)
		} else {
			t.Logf("%s: %s", a[i].step, a[i].value)
		}
	}
}

func decodeChunk(v any) string {
	s, _ := v.(string)
	b, err := base64Decode(s)
	if err != nil {
		return "<bad base64>"
	}
	return string(b)
}

func base64Decode(s string) ([]byte, error) { return base64.StdEncoding.DecodeString(s) }
