// Package sandbox decides and enforces what a command may touch.
//
// The policy model (this file) follows codex's: three modes (read-only,
// workspace-write, full-access) plus network on or off, extra writable
// roots, protected sub-paths inside writable roots, and the split entry
// model — a list of path → read | write | none entries where the most
// specific prefix wins and, among equally specific entries, none beats
// write beats read. A Policy names paths symbolically (":root", ":cwd",
// ":tmpdir", ":project_roots", ":slash_tmp"); Resolve materialises them on
// the executor into absolute paths.
//
// Enforcement on Linux (landlock_linux.go, seccomp_linux.go) happens in a
// helper the executor re-executes; a policy this machine cannot enforce is
// an error, never a silent unsandboxed run.
package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// Mode is a coarse sandbox mode.
type Mode string

const (
	ModeReadOnly       Mode = "read-only"
	ModeWorkspaceWrite Mode = "workspace-write"
	ModeFullAccess     Mode = "full-access"
)

// ParseMode accepts a mode name (and codex's "danger-full-access").
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case ModeReadOnly, ModeWorkspaceWrite, ModeFullAccess:
		return Mode(s), nil
	case "danger-full-access":
		return ModeFullAccess, nil
	}
	return "", fmt.Errorf("unknown sandbox mode %q (want read-only, workspace-write or full-access)", s)
}

// Access is what an entry grants.
type Access string

const (
	AccessNone  Access = "none"
	AccessRead  Access = "read"
	AccessWrite Access = "write"
)

// ParseAccess accepts read, write, none (and codex's alias deny).
func ParseAccess(s string) (Access, error) {
	switch s {
	case "read", "write", "none":
		return Access(s), nil
	case "deny":
		return AccessNone, nil
	}
	return "", fmt.Errorf("unknown access %q (want read, write or none)", s)
}

// rank orders accesses for tie-breaking: none > write > read.
func (a Access) rank() int {
	switch a {
	case AccessNone:
		return 3
	case AccessWrite:
		return 2
	case AccessRead:
		return 1
	}
	return 0
}

// Path symbols materialised on the executor.
const (
	SymRoot         = ":root"
	SymCwd          = ":cwd"
	SymTmpdir       = ":tmpdir"
	SymSlashTmp     = ":slash_tmp"
	SymProjectRoots = ":project_roots"
)

// DefaultProtectedNames stay read-only inside every writable root.
var DefaultProtectedNames = []string{".git", ".outpost", ".agents", ".codex"}

// Entry grants access to a path (absolute, or a symbol).
type Entry struct {
	Path   string
	Access Access
}

// Policy is a sandbox policy as a client states it.
type Policy struct {
	Mode    Mode
	Network bool
	// WritableRoots are extra writable paths for workspace-write.
	WritableRoots []string
	// ProtectedNames overrides DefaultProtectedNames when non-nil.
	ProtectedNames []string
	// Entries, when non-empty, replace the entries Mode implies. A path is
	// absolute or a symbol, optionally with a relative subpath
	// (":project_roots/.git").
	Entries []Entry
	// DenyGlobs are patterns (absolute, or ":project_roots/<pattern>";
	// "**" matches any number of directories) whose matches when the
	// policy is resolved get access none. GlobScanMaxDepth bounds how
	// deep below a pattern's fixed prefix they are looked for (default
	// DefaultGlobScanDepth).
	DenyGlobs        []string
	GlobScanMaxDepth int
}

// DefaultGlobScanDepth bounds the directories a deny glob descends.
const DefaultGlobScanDepth = 16

// Validate reports the first invalid field.
func (p Policy) Validate() error {
	if _, err := ParseMode(string(p.Mode)); err != nil && len(p.Entries) == 0 {
		return err
	}
	for i, e := range p.Entries {
		if _, err := ParseAccess(string(e.Access)); err != nil {
			return fmt.Errorf("entries[%d]: %w", i, err)
		}
		if _, _, ok := splitSymbol(e.Path); !ok && !filepath.IsAbs(e.Path) {
			return fmt.Errorf("entries[%d]: path %q is neither absolute nor a symbol", i, e.Path)
		}
	}
	for i, r := range p.WritableRoots {
		if !isSymbol(r) && !filepath.IsAbs(r) {
			return fmt.Errorf("writableRoots[%d]: %q is not absolute", i, r)
		}
	}
	for _, n := range p.ProtectedNames {
		if n == "" || strings.ContainsRune(n, '/') || n == "." || n == ".." {
			return fmt.Errorf("protected name %q must be a single path element", n)
		}
	}
	return nil
}

func isSymbol(s string) bool {
	switch s {
	case SymRoot, SymCwd, SymTmpdir, SymSlashTmp, SymProjectRoots, SymMinimal:
		return true
	}
	return false
}

// splitSymbol splits ":sym/sub" into the symbol and its relative subpath.
func splitSymbol(s string) (sym, sub string, ok bool) {
	if !strings.HasPrefix(s, ":") {
		return "", "", false
	}
	sym, sub, _ = strings.Cut(s, "/")
	return sym, sub, isSymbol(sym)
}

// entries returns the policy's entries, deriving them from Mode when none
// are given.
func (p Policy) entries() []Entry {
	if len(p.Entries) > 0 {
		return p.Entries
	}
	switch p.Mode {
	case ModeFullAccess:
		return []Entry{{SymRoot, AccessWrite}}
	case ModeWorkspaceWrite:
		es := []Entry{{SymRoot, AccessRead}, {SymCwd, AccessWrite}, {SymProjectRoots, AccessWrite}, {SymTmpdir, AccessWrite}, {SymSlashTmp, AccessWrite}}
		for _, r := range p.WritableRoots {
			es = append(es, Entry{r, AccessWrite})
		}
		return es
	}
	return []Entry{{SymRoot, AccessRead}}
}

// Resolved is a policy materialised on the executor: absolute paths only.
type Resolved struct {
	Network bool
	Entries []Entry // absolute paths, symlinks of existing prefixes resolved
	// Protected lists read-only carve-outs inside writable entries that
	// exist now, at any depth: protected names (directories, files and
	// symlinks — the link itself), the targets of protected symlinks and
	// the git directories that .git files name.
	Protected []string
	// Absent lists protected names missing at the top of writable roots:
	// the sandbox keeps them from being created while the command runs.
	Absent []string
	// ProtectedNames are the names that are read-only at any depth below a
	// writable entry for file operations judged by Allows.
	ProtectedNames []string
	// Workspaces are the cwd and project roots, canonical.
	Workspaces []string
}

// Env is what Resolve needs from the executor.
type Env struct {
	// Cwd is absolute, or empty when the request names none: then :cwd
	// grants nothing, and :project_roots only the ProjectRoots given —
	// never the executor's own working directory.
	Cwd          string
	ProjectRoots []string // absolute; default [Cwd]
	TempDir      string   // default os.TempDir()
	// Translate maps a client path to a native one (pathmap); nil keeps
	// the path as it is.
	Translate func(string) (string, error)
	// NoProjectRootFallback: without ProjectRoots, :project_roots grants
	// nothing (codex's shape: its workspaceRoots, never the cwd).
	NoProjectRootFallback bool
	// SharedTempUnscanned leaves sticky world-writable roots (/tmp) out of
	// the scan for protected names: right when the command runs as its own
	// unprivileged user there (file ownership keeps it out of everyone
	// else's .git), and for fs calls, whose judgment is by name anyway.
	SharedTempUnscanned bool
	// Hidden are the executor's own secrets (its state directory, client
	// configuration, listener sockets): access none whatever the policy
	// says.
	Hidden []string
}

// ErrSymlinkedWorkspace refuses a workspace named through a symlink.
var ErrSymlinkedWorkspace = errors.New("sandbox: a workspace path crosses a symlink")

// checkWorkspaces refuses a workspace — the cwd, a project root, a writable
// root or a write entry — named by a path that crosses a symlink. A
// sandboxed command may write symlinks into its workspace; were a later
// request's cwd to pass through one (ws/docs → /etc, or → /root/.ssh), the
// sandbox would hand that command the link's target as its workspace —
// ID-mapped to it, when the executor is root. So a workspace is named by
// its real path. Paths the executor picks (:tmpdir, :slash_tmp) and read
// entries are exempt.
func (p Policy) checkWorkspaces(env Env) error {
	paths := append([]string{env.Cwd}, env.ProjectRoots...)
	named := append([]string(nil), p.WritableRoots...)
	for _, e := range p.Entries {
		if e.Access == AccessWrite {
			named = append(named, e.Path)
		}
	}
	for _, n := range named {
		if _, _, ok := splitSymbol(n); ok {
			continue
		}
		if env.Translate != nil {
			t, err := env.Translate(n)
			if err != nil {
				return err
			}
			n = t
		}
		paths = append(paths, n)
	}
	for _, path := range paths {
		if path == "" {
			continue
		}
		if link := firstSymlink(path); link != "" {
			real := canonical(path)
			return fmt.Errorf("%w: %s crosses the symlink %s (which a command may have planted): name the real path %s", ErrSymlinkedWorkspace, path, link, real)
		}
	}
	return nil
}

// firstSymlink returns the first component of path that is a symlink, or
// "" (a missing component ends the walk).
func firstSymlink(path string) string {
	cur := "/"
	for _, part := range strings.Split(strings.Trim(filepath.Clean(path), "/"), "/") {
		if part == "" {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return ""
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return cur
		}
	}
	return ""
}

// ErrNotAbsolute rejects a relative path in a policy.
var ErrNotAbsolute = errors.New("sandbox: path is not absolute")

// Resolve materialises the policy's symbols and protected sub-paths.
func (p Policy) Resolve(env Env) (Resolved, error) {
	if err := p.Validate(); err != nil {
		return Resolved{}, err
	}
	if env.Cwd != "" && !filepath.IsAbs(env.Cwd) {
		return Resolved{}, fmt.Errorf("%w: cwd %q", ErrNotAbsolute, env.Cwd)
	}
	if err := p.checkWorkspaces(env); err != nil {
		return Resolved{}, err
	}
	roots := env.ProjectRoots
	if len(roots) == 0 && env.Cwd != "" && !env.NoProjectRootFallback {
		roots = []string{env.Cwd}
	}
	tmp := env.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	var expand func(path string) ([]string, error)
	expand = func(path string) ([]string, error) {
		if sym, sub, ok := splitSymbol(path); ok && sub != "" {
			bases, err := expand(sym)
			if err != nil {
				return nil, err
			}
			out := make([]string, 0, len(bases))
			for _, b := range bases {
				out = append(out, filepath.Join(b, sub))
			}
			return out, nil
		}
		switch path {
		case SymMinimal:
			var out []string
			for _, m := range minimalPaths {
				if _, err := os.Stat(m); err == nil {
					out = append(out, m)
				}
			}
			return out, nil
		case SymRoot:
			return []string{"/"}, nil
		case SymCwd:
			if env.Cwd == "" {
				return nil, nil
			}
			return []string{env.Cwd}, nil
		case SymTmpdir:
			return []string{tmp}, nil
		case SymSlashTmp:
			if fi, err := os.Stat("/tmp"); err == nil && fi.IsDir() {
				return []string{"/tmp"}, nil
			}
			return nil, nil
		case SymProjectRoots:
			return roots, nil
		}
		if env.Translate != nil {
			t, err := env.Translate(path)
			if err != nil {
				return nil, err
			}
			return []string{t}, nil
		}
		return []string{path}, nil
	}
	var r Resolved
	r.Network = p.Network || p.Mode == ModeFullAccess && len(p.Entries) == 0
	if env.Cwd != "" {
		r.Workspaces = append(r.Workspaces, canonical(env.Cwd))
	}
	for _, root := range roots {
		if c := canonical(root); !slices.Contains(r.Workspaces, c) {
			r.Workspaces = append(r.Workspaces, c)
		}
	}
	seen := map[Entry]bool{}
	for _, e := range p.entries() {
		paths, err := expand(e.Path)
		if err != nil {
			return Resolved{}, err
		}
		for _, path := range paths {
			re := Entry{Path: canonical(path), Access: e.Access}
			if !seen[re] {
				seen[re] = true
				r.Entries = append(r.Entries, re)
			}
		}
	}
	for _, g := range p.DenyGlobs {
		patterns, err := expand(g)
		if err != nil {
			return Resolved{}, err
		}
		for _, pat := range patterns {
			matches, err := globMatches(pat, p.GlobScanMaxDepth)
			if err != nil {
				return Resolved{}, err
			}
			for _, m := range matches {
				re := Entry{Path: canonical(m), Access: AccessNone}
				if !seen[re] {
					seen[re] = true
					r.Entries = append(r.Entries, re)
				}
			}
		}
	}
	// Full access with the network on runs unsandboxed by the client's
	// choice; everything else hides the executor's secrets.
	unsandboxed := r.FullWrite() && r.Network
	for _, h := range env.Hidden {
		if unsandboxed {
			break
		}
		re := Entry{Path: canonical(h), Access: AccessNone}
		if !seen[re] {
			seen[re] = true
			r.Entries = append(r.Entries, re)
		}
	}
	names := p.ProtectedNames
	if names == nil {
		names = DefaultProtectedNames
	}
	if p.Mode != ModeFullAccess || len(p.Entries) > 0 {
		r.ProtectedNames = names
		prot, absent, err := scanProtected(r.Entries, r.Workspaces, names, env.SharedTempUnscanned)
		if err != nil {
			return Resolved{}, err
		}
		r.Protected, r.Absent = prot, absent
		for _, prot := range r.Protected {
			re := Entry{Path: prot, Access: AccessRead}
			if !seen[re] {
				seen[re] = true
				r.Entries = append(r.Entries, re)
			}
		}
	}
	return r, nil
}

// canonical cleans path and resolves symlinks in its longest existing
// prefix, so rules match the paths the kernel will see.
func canonical(path string) string {
	path = filepath.Clean(path)
	existing, rest := path, ""
	for {
		if resolved, err := filepath.EvalSymlinks(existing); err == nil {
			if rest == "" {
				return resolved
			}
			return filepath.Join(resolved, rest)
		}
		parent := filepath.Dir(existing)
		if parent == existing {
			return path
		}
		rest = filepath.Join(filepath.Base(existing), rest)
		existing = parent
	}
}

// gitdirOf reads a .git file ("gitdir: <path>", relative to its
// directory) and returns the git directory if it exists.
func gitdirOf(dotGit string) string {
	b, err := os.ReadFile(dotGit)
	if err != nil || len(b) > 4096 {
		return ""
	}
	line, _, _ := strings.Cut(string(b), "\n")
	dir, ok := strings.CutPrefix(strings.TrimSpace(line), "gitdir:")
	if !ok {
		return ""
	}
	dir = strings.TrimSpace(dir)
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(filepath.Dir(dotGit), dir)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return canonical(dir)
}

// Access returns the access the resolved policy grants to path: the most
// specific entry whose path contains it wins; among equally specific
// entries none beats write beats read; no entry means none.
func (r Resolved) Access(path string) Access { return r.accessReal(canonical(path)) }

func (r Resolved) accessReal(path string) Access {
	best, bestLen := AccessNone, -1
	for _, e := range r.Entries {
		if !within(e.Path, path) {
			continue
		}
		l := len(e.Path)
		if l > bestLen || l == bestLen && e.Access.rank() > best.rank() {
			best, bestLen = e.Access, l
		}
	}
	return best
}

// Allows reports whether the resolved policy lets a file operation read
// (write false) or write path: reading needs any access but none; writing
// needs write access outside every protected sub-path and no protected
// name below the writable root. path's symlinks are resolved once (judge
// where a link leads, not where it sits).
func (r Resolved) Allows(path string, write bool) bool {
	return r.AllowsReal(canonical(path), write)
}

// AllowsReal is Allows for a path that is already real — learnt from a
// descriptor (/proc/self/fd), with at most a final name appended — judged
// as it is: resolving it again would let a rename in between point the
// judgment elsewhere.
func (r Resolved) AllowsReal(path string, write bool) bool {
	path = filepath.Clean(path)
	a := r.accessReal(path)
	if a == AccessNone {
		return false
	}
	if !write {
		return true
	}
	if a != AccessWrite {
		return false
	}
	for _, p := range r.Protected {
		if within(p, path) {
			return false
		}
	}
	return !r.namedProtected(path)
}

// namedProtected reports whether a component of path below the writable
// entry that grants it write access is a protected name: .git and its
// kind are read-only at any depth for file operations, existing or not.
func (r Resolved) namedProtected(path string) bool {
	if len(r.ProtectedNames) == 0 {
		return false
	}
	root, rootLen := "", -1
	for _, e := range r.Entries {
		if e.Access == AccessWrite && within(e.Path, path) && len(e.Path) > rootLen {
			root, rootLen = e.Path, len(e.Path)
		}
	}
	if rootLen < 0 {
		return false
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
	for _, comp := range strings.Split(rel, "/") {
		for _, n := range r.ProtectedNames {
			if comp == n {
				return true
			}
		}
	}
	return false
}

// AllowsTree reports whether everything under path (an operation on a
// whole tree: a recursive remove or copy) is as accessible as the
// operation needs: no entry inside it grants less, and for a write no
// protected sub-path lies inside it.
func (r Resolved) AllowsTree(path string, write bool) bool {
	return r.AllowsTreeReal(canonical(path), write)
}

// AllowsTreeReal is AllowsTree for a path that is already real.
func (r Resolved) AllowsTreeReal(path string, write bool) bool {
	path = filepath.Clean(path)
	for _, e := range r.Entries {
		if !within(path, e.Path) {
			continue
		}
		if e.Access == AccessNone || write && e.Access != AccessWrite {
			return false
		}
	}
	if write {
		for _, p := range r.Protected {
			if within(path, p) {
				return false
			}
		}
		if r.namedProtected(path) {
			return false
		}
	}
	return true
}

// ProtectedName reports whether name is kept read-only at any depth below
// a writable root.
func (r Resolved) ProtectedName(name string) bool { return slices.Contains(r.ProtectedNames, name) }

// FullWrite reports whether the policy leaves the whole filesystem
// writable (nothing to enforce on the filesystem).
func (r Resolved) FullWrite() bool {
	for _, e := range r.Entries {
		if e.Path != "/" && e.Access != AccessWrite {
			return false
		}
	}
	return r.Access("/") == AccessWrite
}

// within reports whether path is root or inside it.
func within(root, path string) bool {
	if root == "/" {
		return strings.HasPrefix(path, "/")
	}
	return path == root || strings.HasPrefix(path, root+"/")
}
