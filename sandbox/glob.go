package sandbox

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
)

// Deny globs are expanded when a policy is resolved: their matches get
// access none like any other path. The scan starts at the pattern's fixed
// prefix, reads directories only, descends at most GlobScanMaxDepth levels
// and reads at most maxGlobEntries entries in all; past that the policy is
// refused (ErrGlobTooBroad) rather than enforced with matches missed.
const (
	maxGlobEntries = 100_000
	maxGlobMatches = MaxPolicyEntries
)

// globMatches returns the existing paths that match pattern: an absolute
// path whose segments are path.Match patterns, "**" matching any number
// of directories.
func globMatches(pattern string, maxDepth int) ([]string, error) {
	if maxDepth <= 0 {
		maxDepth = DefaultGlobScanDepth
	}
	segs := strings.Split(strings.Trim(filepath.Clean(pattern), "/"), "/")
	for _, s := range segs {
		if _, err := path.Match(s, ""); err != nil {
			return nil, fmt.Errorf("sandbox: glob %q: %w", pattern, err)
		}
	}
	base := "/"
	for len(segs) > 0 && !strings.ContainsAny(segs[0], "*?[\\") {
		base = filepath.Join(base, segs[0])
		segs = segs[1:]
	}
	g := globScan{pattern: pattern, maxDepth: maxDepth}
	if len(segs) == 0 {
		if _, err := os.Lstat(base); err == nil {
			return []string{base}, nil
		}
		return nil, nil
	}
	if err := g.match(base, segs, 0); err != nil {
		return nil, err
	}
	return g.found, nil
}

type globScan struct {
	pattern  string
	maxDepth int
	read     int
	found    []string
	seen     map[string]bool
}

func (g *globScan) add(p string) error {
	if g.seen == nil {
		g.seen = map[string]bool{}
	}
	if g.seen[p] {
		return nil
	}
	if len(g.found) >= maxGlobMatches {
		return fmt.Errorf("%w: %q matches more than %d paths", ErrGlobTooBroad, g.pattern, maxGlobMatches)
	}
	g.seen[p] = true
	g.found = append(g.found, p)
	return nil
}

// match finds what segs match below dir, depth levels below the prefix.
func (g *globScan) match(dir string, segs []string, depth int) error {
	if len(segs) == 0 {
		return g.add(dir)
	}
	if segs[0] == "**" {
		if err := g.match(dir, segs[1:], depth); err != nil { // zero directories
			return err
		}
	}
	if depth >= g.maxDepth {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil // gone or unreadable: nothing to match
	}
	g.read += len(ents)
	if g.read > maxGlobEntries {
		return fmt.Errorf("%w: %q: more than %d entries to read", ErrGlobTooBroad, g.pattern, maxGlobEntries)
	}
	for _, e := range ents {
		child := filepath.Join(dir, e.Name())
		if segs[0] == "**" {
			if e.IsDir() {
				if err := g.match(child, segs, depth+1); err != nil {
					return err
				}
			}
			continue
		}
		if ok, _ := path.Match(segs[0], e.Name()); !ok {
			continue
		}
		if len(segs) == 1 {
			if err := g.add(child); err != nil {
				return err
			}
		} else if e.IsDir() {
			if err := g.match(child, segs[1:], depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}
