package pathmap

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Mapping maps a client path prefix to an executor path prefix, e.g.
// {Client: "/workspace", Executor: "/srv/ws/42"}.
type Mapping struct{ Client, Executor string }

// Mapper applies the prefix mappings configured on the executor. The longest
// matching prefix wins, and a prefix matches only at a path-component
// boundary: /workspace matches /workspace and /workspace/a, not /workspace2.
// A nil *Mapper is the identity mapping. A Mapper is immutable and safe for
// concurrent use.
type Mapper struct {
	byClient   []Mapping // sorted by len(Client), longest first
	byExecutor []Mapping // sorted by len(Executor), longest first
}

// NewMapper validates ms and returns a Mapper. Both sides of every mapping
// must be absolute and clean; client prefixes must be distinct, and so must
// executor prefixes (otherwise ToClient would be ambiguous).
func NewMapper(ms ...Mapping) (*Mapper, error) {
	seenC := make(map[string]bool, len(ms))
	seenE := make(map[string]bool, len(ms))
	for _, m := range ms {
		for _, side := range []struct{ name, p string }{{"client", m.Client}, {"executor", m.Executor}} {
			if err := checkPrefix(side.p); err != nil {
				return nil, fmt.Errorf("pathmap: mapping %s -> %s: %s prefix %s", quote(m.Client), quote(m.Executor), side.name, err)
			}
		}
		if seenC[m.Client] {
			return nil, fmt.Errorf("pathmap: duplicate client prefix %s", quote(m.Client))
		}
		if seenE[m.Executor] {
			return nil, fmt.Errorf("pathmap: duplicate executor prefix %s (ToClient would be ambiguous)", quote(m.Executor))
		}
		seenC[m.Client], seenE[m.Executor] = true, true
	}
	mp := &Mapper{
		byClient:   append([]Mapping(nil), ms...),
		byExecutor: append([]Mapping(nil), ms...),
	}
	sort.SliceStable(mp.byClient, func(i, j int) bool { return len(mp.byClient[i].Client) > len(mp.byClient[j].Client) })
	sort.SliceStable(mp.byExecutor, func(i, j int) bool { return len(mp.byExecutor[i].Executor) > len(mp.byExecutor[j].Executor) })
	return mp, nil
}

func checkPrefix(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("is empty")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("%s contains a NUL byte", quote(p))
	case !filepath.IsAbs(p):
		return fmt.Errorf("%s is not absolute", quote(p))
	case filepath.Clean(p) != p:
		return fmt.Errorf("%s is not clean (want %s)", quote(p), quote(filepath.Clean(p)))
	}
	return nil
}

// ToExecutor converts a client path (absolute path or file: URI) with Native
// and then applies the longest matching client prefix. Paths matching no
// prefix are returned unmapped.
func (m *Mapper) ToExecutor(clientPath string) (string, error) {
	p, err := Native(clientPath)
	if err != nil || m == nil {
		return p, err
	}
	for _, mp := range m.byClient {
		if under(p, mp.Client) {
			return rebase(p, mp.Client, mp.Executor), nil
		}
	}
	return p, nil
}

// ToClient maps an executor path reported back to the client (longest
// matching executor prefix). Absolute paths are cleaned; paths matching no
// prefix, and non-absolute input, are returned otherwise unchanged.
func (m *Mapper) ToClient(executorPath string) string {
	if !filepath.IsAbs(executorPath) {
		return executorPath
	}
	p := filepath.Clean(executorPath)
	if m == nil {
		return p
	}
	for _, mp := range m.byExecutor {
		if under(p, mp.Executor) {
			return rebase(p, mp.Executor, mp.Client)
		}
	}
	return p
}

// Policy symbols understood by Roots.
const (
	SymbolCwd          = ":cwd"
	SymbolTmpdir       = ":tmpdir"
	SymbolProjectRoots = ":project_roots"
)

// Roots materialises the entries of a sandbox policy on the executor:
//
//   - ":cwd" becomes cwd;
//   - ":tmpdir" becomes os.TempDir() and $TMPDIR when set (absolute values only;
//     they are usually the same directory);
//   - ":project_roots" becomes the given project roots (none if the slice is
//     empty: choosing a fallback such as cwd is the caller's policy);
//   - any other entry starting with ':' is an error;
//   - every other entry is a client path and goes through m.ToExecutor.
//
// cwd and projectRoots are executor paths already (absolute paths or file:
// URIs; they are validated with Native but not mapped). Roots returns clean
// absolute paths, de-duplicated, in input order. Symlinks are not resolved.
func (m *Mapper) Roots(entries []string, cwd string, projectRoots []string) ([]string, error) {
	var out []string
	seen := make(map[string]bool)
	add := func(p string) {
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	native := func(what, p string) (string, error) {
		n, err := Native(p)
		if err != nil {
			return "", fmt.Errorf("pathmap: %s: %w", what, err)
		}
		return n, nil
	}
	for _, e := range entries {
		switch {
		case e == SymbolCwd:
			if cwd == "" {
				return nil, fmt.Errorf("pathmap: %s requested but no cwd is known", SymbolCwd)
			}
			p, err := native(SymbolCwd, cwd)
			if err != nil {
				return nil, err
			}
			add(p)
		case e == SymbolTmpdir:
			n := 0
			for _, t := range []string{os.TempDir(), os.Getenv("TMPDIR")} {
				if t == "" || !filepath.IsAbs(t) || strings.IndexByte(t, 0) >= 0 {
					continue
				}
				add(filepath.Clean(t))
				n++
			}
			if n == 0 {
				add("/tmp")
			}
		case e == SymbolProjectRoots:
			for _, r := range projectRoots {
				p, err := native(SymbolProjectRoots, r)
				if err != nil {
					return nil, err
				}
				add(p)
			}
		case strings.HasPrefix(e, ":"):
			return nil, fmt.Errorf("pathmap: unknown root symbol %s (known: %s, %s, %s)", quote(e), SymbolCwd, SymbolTmpdir, SymbolProjectRoots)
		default:
			p, err := m.ToExecutor(e)
			if err != nil {
				return nil, err
			}
			add(p)
		}
	}
	return out, nil
}
