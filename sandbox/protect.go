package sandbox

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
)

// Protected names are read-only at any depth below a writable root: a
// nested repository's .git (vendor/x/.git, a submodule) is as dangerous to
// hand a command as the top one — its config can name a program that git
// runs later (core.fsmonitor, hooks). scanProtected walks every writable
// root once per start to find them. The walk reads directories only
// (getdents, no stat of files), does not descend into a protected
// directory (it is read-only whole) nor into another filesystem, and is
// bounded: past MaxProtectScanEntries entries or MaxProtectedPaths finds
// the start is refused rather than run with some of them unprotected.
const (
	// MaxProtectScanEntries bounds the directory entries read per start.
	MaxProtectScanEntries = 200_000
	// MaxProtectedPaths bounds the protected paths (each a mount) per start.
	MaxProtectedPaths = 1024
)

// ErrTooManyToProtect refuses a start whose writable roots hold more than
// the scan can cover.
var ErrTooManyToProtect = errors.New("sandbox: writable roots too large to scan for protected names")

// scanProtected lists the protected names that exist below writable
// entries (and, for symlinks and .git files, where they lead), and the
// names missing at the top of each writable root.
//
// "/" as a writable root (a policy that writes everywhere) is not walked —
// that would be the whole machine on every start; the workspaces are,
// then, and nothing is held absent at the top of "/".
func scanProtected(entries []Entry, workspaces, names []string, sharedTempUnscanned bool) (protected, absent []string, err error) {
	isName := make(map[string]bool, len(names))
	for _, n := range names {
		isName[n] = true
	}
	seen := map[string]bool{}
	add := func(p string) error {
		if seen[p] {
			return nil
		}
		if len(protected) >= MaxProtectedPaths {
			return fmt.Errorf("%w: more than %d protected paths", ErrTooManyToProtect, MaxProtectedPaths)
		}
		seen[p] = true
		protected = append(protected, p)
		return nil
	}
	budget := MaxProtectScanEntries
	var roots []string
	for _, e := range entries {
		if e.Access == AccessWrite && e.Path != "/" {
			roots = append(roots, e.Path)
		}
		if e.Access == AccessWrite && e.Path == "/" {
			roots = append(roots, workspaces...)
		}
	}
	sort.Strings(roots)
	scanned := map[string]bool{}
	for _, root := range roots {
		fi, err := os.Stat(root)
		if err != nil || !fi.IsDir() {
			continue
		}
		if sharedTempUnscanned && fi.Mode()&(os.ModeSticky|0o002) == os.ModeSticky|0o002 {
			continue
		}
		for _, n := range names {
			if _, err := os.Lstat(filepath.Join(root, n)); errors.Is(err, os.ErrNotExist) {
				absent = append(absent, filepath.Join(root, n))
			}
		}
		// A root inside another root was scanned with it.
		inner := false
		for s := range scanned {
			if within(s, root) {
				inner = true
			}
		}
		if inner {
			continue
		}
		scanned[root] = true
		dev := deviceOf(fi)
		if err := walkProtected(root, dev, isName, &budget, add, 0); err != nil {
			return nil, nil, err
		}
	}
	sort.Strings(protected)
	return protected, absent, nil
}

// maxProtectScanDepth bounds the recursion of the scan.
const maxProtectScanDepth = 256

func walkProtected(dir string, dev uint64, isName map[string]bool, budget *int, add func(string) error, depth int) error {
	if depth > maxProtectScanDepth {
		return fmt.Errorf("%w: %s is nested more than %d deep", ErrTooManyToProtect, dir, maxProtectScanDepth)
	}
	d, err := os.Open(dir)
	if err != nil {
		return nil // unreadable: nothing the scan can see, nothing to protect
	}
	defer d.Close()
	for {
		ents, err := d.ReadDir(256)
		for _, e := range ents {
			if *budget--; *budget < 0 {
				return fmt.Errorf("%w: more than %d entries below the writable roots", ErrTooManyToProtect, MaxProtectScanEntries)
			}
			p := filepath.Join(dir, e.Name())
			if isName[e.Name()] {
				if err := protectEntry(p, e.Type(), add); err != nil {
					return err
				}
				continue
			}
			if !e.IsDir() {
				continue
			}
			if sub, ok := lstatDevice(p); !ok || sub != dev {
				continue // gone, or another filesystem mounted here
			}
			if err := walkProtected(p, dev, isName, budget, add, depth+1); err != nil {
				return err
			}
		}
		if err == io.EOF || len(ents) == 0 {
			return nil
		}
		if err != nil {
			return nil
		}
	}
}

// protectEntry protects a protected name found at p: the entry itself, a
// symlink's target and a .git file's git directory.
func protectEntry(p string, typ os.FileMode, add func(string) error) error {
	if err := add(p); err != nil {
		return err
	}
	switch {
	case typ&os.ModeSymlink != 0:
		if t, err := filepath.EvalSymlinks(p); err == nil {
			return add(t)
		}
	case typ.IsRegular() && filepath.Base(p) == ".git":
		if gd := gitdirOf(p); gd != "" {
			return add(gd)
		}
	}
	return nil
}
