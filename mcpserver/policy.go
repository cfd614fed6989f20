package mcpserver

import (
	"path"
	"slices"
	"strings"

	"github.com/outpost-exec/outpost/sandbox"
)

// commandArgs are the inputs run and start share.
type commandArgs struct {
	Argv     []string          `json:"argv,omitempty" jsonschema:"the program and its arguments, run without a shell; give argv or shell, not both"`
	Shell    string            `json:"shell,omitempty" jsonschema:"a command line for /bin/sh -c on the executor (pipes, redirections, globs); give argv or shell, not both"`
	Cwd      string            `json:"cwd,omitempty" jsonschema:"working directory on the executor, relative to the workspace or absolute; default the workspace"`
	Env      map[string]string `json:"env,omitempty" jsonschema:"environment variables added to the executor's core ones (PATH, HOME, LANG, ...)"`
	Sandbox  string            `json:"sandbox,omitempty" jsonschema:"sandbox mode: read-only (reads anywhere, writes nowhere), workspace-write (writes only in the workspace) or full-access; only modes the operator allows; default the server's"`
	Network  bool              `json:"network,omitempty" jsonschema:"let the sandboxed command use the network (only when the operator allows it)"`
	Executor string            `json:"executor,omitempty" jsonschema:"which executor to use (see the executors tool); default the first configured"`
}

// argv turns argv or shell into the command line to run.
func (a commandArgs) argv() ([]string, error) {
	switch {
	case len(a.Argv) > 0 && a.Shell != "":
		return nil, errorf(ErrInvalidArgument, "give argv or shell, not both")
	case a.Shell != "":
		a.Argv = []string{"/bin/sh", "-c", a.Shell}
	case len(a.Argv) == 0:
		return nil, errorf(ErrInvalidArgument, "give the command: argv (a list of strings) or shell (a command line)")
	case a.Argv[0] == "":
		return nil, errorf(ErrInvalidArgument, "argv[0] is empty")
	}
	n := 0
	for _, s := range a.Argv {
		n += len(s) + 1
	}
	if n > maxArgvBytes {
		return nil, errorf(ErrInvalidArgument, "the command line is %d bytes, at most %d", n, maxArgvBytes)
	}
	if len(a.Env) > maxEnvEntries {
		return nil, errorf(ErrInvalidArgument, "%d environment variables, at most %d", len(a.Env), maxEnvEntries)
	}
	for k := range a.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return nil, errorf(ErrInvalidArgument, "environment variable name %q is not valid", k)
		}
	}
	return a.Argv, nil
}

// resolvePath makes p absolute on the executor: relative to the
// workspace, cleaned lexically (the executor resolves symlinks and judges
// the result by the sandbox).
func resolvePath(workspace, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", errorf(ErrInvalidArgument, "path contains a NUL byte")
	}
	if p == "" {
		return workspace, nil
	}
	if !path.IsAbs(p) {
		p = path.Join(workspace, p)
	}
	return path.Clean(p), nil
}

// within reports whether p is root or below it, lexically.
func within(p, root string) bool {
	return p == root || root == "/" || strings.HasPrefix(p, strings.TrimSuffix(root, "/")+"/")
}

// commandPolicy decides a command's sandbox: the mode it asked for (or
// the default), checked against the operator's allow-list, network and
// the workspace. It returns the policy object for process/start and the
// mode.
func (s *Server) commandPolicy(mode string, network bool, cwd, workspace string) (any, string, error) {
	switch {
	case mode == "" && s.cfg.ReadOnly:
		mode = string(sandbox.ModeReadOnly)
	case mode == "":
		mode = s.cfg.DefaultSandbox
	}
	if _, err := sandbox.ParseMode(mode); err != nil {
		return nil, "", errorf(ErrInvalidArgument, "sandbox %q: want read-only, workspace-write or full-access", mode)
	}
	if s.cfg.ReadOnly && mode != string(sandbox.ModeReadOnly) {
		return nil, "", errorf(ErrNotAllowed, "this server is read-only: commands run in the read-only sandbox, not %s", mode)
	}
	if !s.cfg.ReadOnly && !slices.Contains(s.cfg.AllowedSandboxes, mode) {
		return nil, "", errorf(ErrNotAllowed, "sandbox %s is not allowed here; the operator allows %s", mode, strings.Join(s.cfg.AllowedSandboxes, ", "))
	}
	if network && !s.cfg.Network {
		return nil, "", errorf(ErrNotAllowed, "network access is not allowed here (the operator did not give --network)")
	}
	if mode == string(sandbox.ModeWorkspaceWrite) && !within(cwd, workspace) {
		return nil, "", errorf(ErrNotAllowed, "cwd %s is outside the workspace %s: workspace-write runs inside the workspace (use read-only to run elsewhere)", cwd, workspace)
	}
	pol := map[string]any{"mode": mode, "network": network}
	if mode == string(sandbox.ModeWorkspaceWrite) && cwd != workspace {
		// The whole workspace stays writable from a subdirectory.
		pol["writableRoots"] = []string{workspace}
	}
	return pol, mode, nil
}

// filePolicy is the sandbox of a file tool: read-only for reading, the
// server's default mode for writing, with the workspace as cwd (so
// workspace-write writes there and nowhere else).
func (s *Server) filePolicy(write bool, workspace string) (any, error) {
	mode := string(sandbox.ModeReadOnly)
	if write {
		if s.cfg.ReadOnly {
			return nil, errorf(ErrNotAllowed, "this server is read-only")
		}
		mode = s.cfg.DefaultSandbox
	}
	return map[string]any{"mode": mode, "cwd": workspace}, nil
}
