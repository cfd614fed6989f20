//go:build linux || darwin || freebsd

package remotefs

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// codex's fs/* calls carry its own sandbox shape, in the two forms codex
// 0.145's apply_patch sends within one turn: with cwd and workspaceRoots
// and symbolic project roots, and then with the project roots already
// materialised into path entries and no cwd at all.
func TestFsCallsJudgedByCodexsSandboxShapes(t *testing.T) {
	sess := fsTestSession(t)
	base := fsPrivateDir(t)
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "outside")
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.Mkdir(out, 0o755)
	uri := "file://" + ws
	special := func(kind, sub, access string) map[string]any {
		v := map[string]any{"kind": kind}
		if sub != "" {
			v["subpath"] = sub
		}
		return map[string]any{"path": map[string]any{"type": "special", "value": v}, "access": access}
	}
	path := func(p, access string) map[string]any {
		return map[string]any{"path": map[string]any{"type": "path", "path": "file://" + p}, "access": access}
	}
	ctx := func(entries []any, withCwd bool) map[string]any {
		c := map[string]any{"permissions": map[string]any{"type": "managed",
			"file_system": map[string]any{"type": "restricted", "entries": entries}, "network": "restricted"},
			"windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": true, "useLegacyLandlock": false}
		if withCwd {
			c["cwd"], c["workspaceRoots"] = uri, []string{uri}
		}
		return c
	}
	symbolic := ctx([]any{special("root", "", "read"), special("project_roots", "", "write"), special("slash_tmp", "", "write"),
		special("tmpdir", "", "write"), special("project_roots", ".git", "read"), special("project_roots", ".agents", "read"),
		special("project_roots", ".codex", "read")}, true)
	materialised := ctx([]any{special("root", "", "read"), path(ws, "write"), special("slash_tmp", "", "write"),
		special("tmpdir", "", "write"), path(filepath.Join(ws, ".git"), "read"), path(filepath.Join(ws, ".agents"), "read"),
		path(filepath.Join(ws, ".codex"), "read")}, false)
	for name, sb := range map[string]map[string]any{"symbolic": symbolic, "materialised, no cwd": materialised} {
		inside := filepath.Join(ws, name+".txt")
		if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: "file://" + inside, Data: []byte("x"), Sandbox: sb}); err != nil {
			t.Errorf("%s: a write inside the workspace: %v", name, err)
		}
		for _, denied := range []string{filepath.Join(out, "x"), filepath.Join(ws, ".git", "config"), filepath.Join(ws, "sub", ".git", "hooks", "x")} {
			if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: "file://" + denied, Data: []byte("x"), Sandbox: sb}); fsCode(t, err) != protocol.CodeInvalidRequest {
				t.Errorf("%s: %s: %v", name, denied, err)
			}
			if fsExists(denied) {
				t.Errorf("%s: wrote %s", name, denied)
			}
		}
		if _, err := sess.ReadFile(protocol.FsReadFileParams{Path: "file://" + inside, Sandbox: sb}); err != nil {
			t.Errorf("%s: read: %v", name, err)
		}
	}
	// Without workspaceRoots, codex's project roots grant nothing (as in
	// codex 0.145): the workspace is read-only.
	noRoots := ctx(symbolic["permissions"].(map[string]any)["file_system"].(map[string]any)["entries"].([]any), false)
	noRoots["cwd"] = uri
	if _, err := sess.WriteFile(protocol.FsWriteFileParams{Path: "file://" + filepath.Join(ws, "no-roots"), Data: []byte("x"), Sandbox: noRoots}); fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("project roots without workspaceRoots granted a write: %v", err)
	}
}
