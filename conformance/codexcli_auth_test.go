package conformance

// codex 0.171's capability token, end to end: an environments.toml entry
// with auth_bearer_token reaching `outpost executor serve --ws-auth
// capability-token` (the token given as a file and as its digest), and a
// wrong token refused without the command running anywhere — with
// include_local = false, as the README tells users, codex cannot fall back
// to running it on its own machine. codex's own server, with the same
// flags, is the reference.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/fakemodel"
	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/procgroup"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

func TestCodexCLICapabilityToken(t *testing.T) {
	cli, err := peers.CodexBinary()
	if err != nil {
		testdeps.Missing(t, "codex", "skipping the codex CLI test: %v", err)
	}
	bin := outpostBinary(t)
	const token = "capability-token-for-the-test"
	tokFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(token))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	servers := map[string][]string{
		"codex":          {cli, "exec-server", "--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token", "--ws-token-file", tokFile},
		"outpost-file":   {bin, "executor", "serve", "--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token", "--ws-token-file", tokFile, "--log-level", "warn"},
		"outpost-digest": {bin, "executor", "serve", "--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token", "--ws-token-sha256", hex.EncodeToString(sum[:]), "--log-level", "warn"},
		"outpost-bridge": nil, // filled below: a bridge with the token, to a tcp:// executor
	}
	native, err := peers.StartOutpostNative(ctx, bin, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(native.Stop)
	servers["outpost-bridge"] = []string{bin, "bridge", "--target", native.URL, "--listen", "ws://127.0.0.1:0", "--ws-auth", "capability-token", "--ws-token-file", tokFile, "--log-level", "warn"}
	for name, argv := range servers {
		t.Run(name, func(t *testing.T) {
			srv, err := peers.Start(ctx, []string{"XDG_CONFIG_HOME=" + t.TempDir()}, argv...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(srv.Stop)
			url := strings.Fields(srv.URL)[0]
			// The right token: the command runs there.
			out, ran := codexWithToken(t, cli, url, token, false)
			if !ran || !strings.Contains(out, "ran-with-token") {
				t.Fatalf("with the right token the command did not run (ran %v); codex printed:\n%s", ran, out)
			}
			// A wrong one: refused, and the command runs nowhere.
			out, ran = codexWithToken(t, cli, url, token+"-wrong", false)
			if ran {
				t.Fatalf("with a wrong token the command ran; codex printed:\n%s", out)
			}
			t.Logf("wrong token: codex said %s", lastLines(out, 3))
			// What the README warns of: with the local environment kept
			// (codex's default), the refused command runs on this machine.
			// If this starts failing, codex changed: update the README.
			if _, ran = codexWithToken(t, cli, url, token+"-wrong", true); !ran {
				t.Errorf("with include_local, a refused token no longer runs the command locally: the README's warning is stale")
			}
		})
	}
}

// codexWithToken runs one `codex exec` turn whose command touches a
// marker file, against the exec-server at url with the bearer token from
// environments.toml (include_local = false), and says whether the marker
// appeared; codex's output is returned for the report.
func codexWithToken(t *testing.T, cli, url, token string, includeLocal bool) (string, bool) {
	t.Helper()
	ws := t.TempDir()
	marker := filepath.Join(t.TempDir(), "ran")
	model := fakemodel.Start([]fakemodel.Step{{Exec: &fakemodel.ExecCall{Cmd: "echo ran-with-token; touch " + marker}}})
	defer model.Close()
	home := t.TempDir()
	env, err := fakemodel.CodexEnv(home, model.BaseURL(), "")
	if err != nil {
		t.Fatal(err)
	}
	toml := fmt.Sprintf("include_local = %v\ndefault = \"remote\"\n\n[[environments]]\nid = \"remote\"\nurl = %s\nauth_bearer_token = %s\n", includeLocal, tomlString(url), tomlString(token))
	if err := os.WriteFile(filepath.Join(home, "environments.toml"), []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(context.Background(), codexRunTimeout)
	defer cancel()
	cmd := exec.CommandContext(rctx, cli, fakemodel.CodexExecArgs(ws, "--dangerously-bypass-approvals-and-sandbox")...)
	cmd.Dir, cmd.Env = ws, env
	procgroup.KillOnCancel(cmd)
	cmd.WaitDelay = 5 * time.Second
	out, _ := cmd.CombinedOutput()
	if rctx.Err() != nil {
		t.Fatalf("codex exec did not finish within %v:\n%s", codexRunTimeout, out)
	}
	for _, o := range model.ToolOutputs() {
		out = append(out, fmt.Sprintf("\ntool output: %s", &o)...)
	}
	_, err = os.Stat(marker)
	return string(out), err == nil
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
