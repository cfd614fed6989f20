package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/outpost-exec/outpost/pathmap"
)

// codex's sandbox context, as codex 0.145 sends it in process/start and
// fs/* (its FileSystemSandboxContext):
//
//	{"permissions": {"type": "managed",
//	                 "file_system": {"type": "restricted", "entries": [
//	                     {"path": {"type": "special", "value": {"kind": "root"}}, "access": "read"},
//	                     {"path": {"type": "special", "value": {"kind": "project_roots", "subpath": ".git"}}, "access": "read"},
//	                     {"path": {"type": "path", "path": "file:///srv/x"}, "access": "write"},
//	                     {"path": {"type": "glob_pattern", "pattern": "codex-project-roots://**/*.env"}, "access": "deny"}],
//	                 "glob_scan_max_depth": 3},
//	                 "network": "restricted"},
//	 "cwd": "file:///w", "workspaceRoots": ["file:///w"],
//	 "windowsSandboxLevel": "disabled", "windowsSandboxPrivateDesktop": true, "useLegacyLandlock": false}
//
// The top level is camelCase, everything under permissions snake_case;
// unknown fields are ignored, as codex ignores them. permissions is
// "managed" (file_system restricted or unrestricted, network restricted
// or enabled), "disabled" (no sandbox) or "external" (the file system is
// someone else's to confine; only the network is ours). Special paths:
// root, minimal (the system directories programs need), project_roots —
// alias current_working_directory — with an optional subpath (the
// workspaceRoots, never the cwd: codex 0.145 does not fall back to it),
// tmpdir (the command's $TMPDIR), slash_tmp and unknown (ignored). Paths
// are file: URIs; access is read, write or deny (alias none). Windows
// levels and legacy Landlock mean nothing on Linux and are ignored, as
// codex's Linux server ignores them.
//
// The context maps onto outpost's own Policy, so codex's policies get
// outpost's guarantees besides (protected names at any depth, hidden
// secrets, an unprivileged user).

// Context is a sandbox object from the wire: the policy and, when the
// client says so, where it applies.
type Context struct {
	Policy Policy
	// Cwd is the client's cwd for the policy (a file: URI or path), ""
	// when it names none.
	Cwd string
	// WorkspaceRoots are codex's project roots (file: URIs); with Codex
	// set and none given, :project_roots grants nothing.
	WorkspaceRoots []string
	// Codex: the context came in codex's shape.
	Codex bool
}

// Symbols of codex's special paths that outpost's own shape lacks.
const (
	// SymMinimal is the system directories programs need to run.
	SymMinimal = ":minimal"
)

// minimalPaths are what codex's "minimal" grants (those that exist).
var minimalPaths = []string{"/bin", "/sbin", "/usr", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/nix/store", "/run/current-system/sw"}

// projectRootsScheme prefixes a glob relative to each project root.
const projectRootsScheme = "codex-project-roots://"

// ParseContext decodes a sandbox object in outpost's shape (see
// ParsePolicy, plus an optional "cwd") or codex's, telling them apart by
// codex's "permissions" member.
func ParseContext(data []byte) (Context, error) {
	if len(data) > MaxPolicyBytes {
		return Context{}, fmt.Errorf("sandbox policy of %d bytes exceeds %d", len(data), MaxPolicyBytes)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(data, &probe); err != nil {
		return Context{}, fmt.Errorf("sandbox policy: %w", err)
	}
	if _, ok := probe["permissions"]; !ok {
		p, err := ParsePolicy(data)
		if err != nil {
			return Context{}, err
		}
		var c struct {
			Cwd string `json:"cwd"`
		}
		json.Unmarshal(data, &c)
		return Context{Policy: p, Cwd: c.Cwd}, nil
	}
	return parseCodex(data)
}

type codexContext struct {
	Permissions    *codexPermissions `json:"permissions"`
	Cwd            *string           `json:"cwd"`
	WorkspaceRoots []string          `json:"workspaceRoots"`
	// windowsSandboxLevel, windowsSandboxPrivateDesktop and
	// useLegacyLandlock are accepted and ignored.
}

type codexPermissions struct {
	Type       string           `json:"type"`
	FileSystem *codexFileSystem `json:"file_system"`
	Network    *string          `json:"network"`
}

type codexFileSystem struct {
	Type             string       `json:"type"`
	Entries          []codexEntry `json:"entries"`
	GlobScanMaxDepth *int         `json:"glob_scan_max_depth"`
}

type codexEntry struct {
	Path   *codexPath `json:"path"`
	Access string     `json:"access"`
}

type codexPath struct {
	Type    string        `json:"type"`
	Path    string        `json:"path"`
	Pattern string        `json:"pattern"`
	Value   *codexSpecial `json:"value"`
}

type codexSpecial struct {
	Kind    string  `json:"kind"`
	Subpath *string `json:"subpath"`
	Path    string  `json:"path"`
}

// errCodex names the field of a codex context that is wrong.
func errCodex(field, format string, args ...any) error {
	return fmt.Errorf("sandbox: %s: %s", field, fmt.Sprintf(format, args...))
}

func parseCodex(data []byte) (Context, error) {
	var cc codexContext
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&cc); err != nil {
		return Context{}, fmt.Errorf("sandbox: %w", err)
	}
	ctx := Context{Codex: true}
	if cc.Cwd != nil {
		if _, err := pathmap.Native(*cc.Cwd); err != nil {
			return Context{}, errCodex("cwd", "%v", err)
		}
		ctx.Cwd = *cc.Cwd
	}
	if len(cc.WorkspaceRoots) > MaxPolicyEntries {
		return Context{}, errCodex("workspaceRoots", "more than %d", MaxPolicyEntries)
	}
	for i, r := range cc.WorkspaceRoots {
		if _, err := pathmap.Native(r); err != nil {
			return Context{}, errCodex(fmt.Sprintf("workspaceRoots[%d]", i), "%v", err)
		}
	}
	ctx.WorkspaceRoots = cc.WorkspaceRoots
	perm := cc.Permissions
	if perm == nil {
		return Context{}, errCodex("permissions", "missing")
	}
	network := func() (bool, error) {
		if perm.Network == nil {
			return false, errCodex("permissions.network", "missing (want restricted or enabled)")
		}
		switch *perm.Network {
		case "restricted":
			return false, nil
		case "enabled":
			return true, nil
		}
		return false, errCodex("permissions.network", "unknown %q (want restricted or enabled)", *perm.Network)
	}
	switch perm.Type {
	case "disabled":
		// No sandbox: what codex's danger-full-access means.
		ctx.Policy = Policy{Mode: ModeFullAccess}
		return ctx, nil
	case "external":
		// Another sandbox confines the file system; the network is ours.
		on, err := network()
		if err != nil {
			return Context{}, err
		}
		ctx.Policy = Policy{Entries: []Entry{{SymRoot, AccessWrite}}, Network: on}
		return ctx, nil
	case "managed":
	default:
		return Context{}, errCodex("permissions.type", "unknown %q (want managed, disabled or external)", perm.Type)
	}
	on, err := network()
	if err != nil {
		return Context{}, err
	}
	fsys := perm.FileSystem
	if fsys == nil {
		return Context{}, errCodex("permissions.file_system", "missing")
	}
	switch fsys.Type {
	case "unrestricted":
		ctx.Policy = Policy{Entries: []Entry{{SymRoot, AccessWrite}}, Network: on}
		return ctx, nil
	case "restricted":
	default:
		return Context{}, errCodex("permissions.file_system.type", "unknown %q (want restricted or unrestricted)", fsys.Type)
	}
	if fsys.Entries == nil {
		return Context{}, errCodex("permissions.file_system.entries", "missing")
	}
	if len(fsys.Entries) > MaxPolicyEntries {
		return Context{}, errCodex("permissions.file_system.entries", "more than %d", MaxPolicyEntries)
	}
	p := Policy{Network: on}
	if d := fsys.GlobScanMaxDepth; d != nil {
		if *d < 1 {
			return Context{}, errCodex("permissions.file_system.glob_scan_max_depth", "must be at least 1")
		}
		p.GlobScanMaxDepth = *d
	}
	for i, e := range fsys.Entries {
		field := fmt.Sprintf("permissions.file_system.entries[%d]", i)
		a, err := ParseAccess(e.Access)
		if err != nil {
			return Context{}, errCodex(field+".access", "%v", err)
		}
		if e.Path == nil {
			return Context{}, errCodex(field+".path", "missing")
		}
		switch e.Path.Type {
		case "path":
			native, err := pathmap.Native(e.Path.Path)
			if err != nil {
				return Context{}, errCodex(field+".path.path", "%v", err)
			}
			p.Entries = append(p.Entries, Entry{native, a})
		case "special":
			sym, err := codexSpecialPath(field+".path.value", e.Path.Value)
			if err != nil {
				return Context{}, err
			}
			if sym != "" {
				p.Entries = append(p.Entries, Entry{sym, a})
			}
		case "glob_pattern":
			if a != AccessNone {
				// Granting by glob would need a rule per match for Landlock;
				// codex clients send globs only to deny.
				return Context{}, errCodex(field, "glob_pattern entries are supported with access deny only, not %s", a)
			}
			g, err := codexGlob(field+".path.pattern", e.Path.Pattern)
			if err != nil {
				return Context{}, err
			}
			p.DenyGlobs = append(p.DenyGlobs, g)
		default:
			return Context{}, errCodex(field+".path.type", "unknown %q (want path, glob_pattern or special)", e.Path.Type)
		}
	}
	if err := p.Validate(); err != nil {
		return Context{}, fmt.Errorf("sandbox: %w", err)
	}
	ctx.Policy = p
	return ctx, nil
}

// codexSpecialPath maps a special path to a symbol ("" for unknown, which
// codex keeps for later versions and ignores).
func codexSpecialPath(field string, v *codexSpecial) (string, error) {
	if v == nil {
		return "", errCodex(field, "missing")
	}
	switch v.Kind {
	case "root":
		return SymRoot, nil
	case "minimal":
		return SymMinimal, nil
	case "tmpdir":
		return SymTmpdir, nil
	case "slash_tmp":
		return SymSlashTmp, nil
	case "unknown":
		return "", nil
	case "project_roots", "current_working_directory":
		if v.Subpath == nil || *v.Subpath == "" {
			return SymProjectRoots, nil
		}
		sub := *v.Subpath
		if filepath.IsAbs(sub) {
			return filepath.Clean(sub), nil // an absolute subpath replaces the root
		}
		if strings.ContainsRune(sub, 0) {
			return "", errCodex(field+".subpath", "contains a NUL byte")
		}
		return SymProjectRoots + "/" + filepath.Clean(sub), nil
	}
	return "", errCodex(field+".kind", "unknown %q (want root, minimal, current_working_directory, project_roots, tmpdir, slash_tmp or unknown)", v.Kind)
}

// codexGlob turns a codex glob into outpost's: an absolute pattern, or
// :project_roots/<pattern> for one relative to each project root.
func codexGlob(field, pattern string) (string, error) {
	if rest, ok := strings.CutPrefix(pattern, projectRootsScheme); ok {
		if rest == "" || strings.HasPrefix(rest, "/") {
			return "", errCodex(field, "%q: want %s<relative pattern>", pattern, projectRootsScheme)
		}
		return SymProjectRoots + "/" + rest, nil
	}
	if !strings.HasPrefix(pattern, "/") {
		return "", errCodex(field, "%q is neither absolute nor %s…", pattern, projectRootsScheme)
	}
	return pattern, nil
}

// ErrGlobTooBroad refuses a deny glob whose matches cannot all be found
// within the scan's bounds.
var ErrGlobTooBroad = errors.New("sandbox: a deny glob matches more than can be scanned")
