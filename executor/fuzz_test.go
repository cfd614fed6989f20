package executor

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

// FuzzNativePath: any string either fails with ErrForeignPath or yields a
// clean absolute path without NUL or "..".
func FuzzNativePath(f *testing.F) {
	for _, s := range []string{"file:///tmp", "/tmp/../etc", "file://localhost/a%20b", `C:\x`, "file:///C:/x", "relative", "file://host/x", "file:", "/\x00", `\\srv\share`, "file:///%2e%2e/etc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := NativePath(s)
		if err != nil {
			if p != "" {
				t.Fatalf("error %v with path %q", err, p)
			}
			return
		}
		if !filepath.IsAbs(p) || filepath.Clean(p) != p || strings.ContainsRune(p, 0) {
			t.Fatalf("NativePath(%q) = %q: not a clean absolute path", s, p)
		}
		for _, part := range strings.Split(p, "/") {
			if part == ".." {
				t.Fatalf("NativePath(%q) = %q keeps ..", s, p)
			}
		}
	})
}

// FuzzChildEnv: no policy or overlay input may panic, and an accepted
// environment never holds a name with '=' or NUL.
func FuzzChildEnv(f *testing.F) {
	f.Add("all", "*KEY*", "PATH", "A", "1", "B=2")
	f.Add("core", "[", "", "", "", "")
	f.Add("none", "", "X*", "X\x00", "v", "")
	f.Fuzz(func(t *testing.T, inherit, exclude, include, key, value, base string) {
		policy := &protocol.EnvPolicy{Inherit: protocol.EnvPolicyInherit(inherit), Exclude: []string{exclude}, IncludeOnly: []string{include}, Set: map[string]string{key: value}}
		env, err := ChildEnv(policy, map[string]string{key: value}, strings.Split(base, "\n"))
		if err != nil {
			return
		}
		for _, kv := range env {
			k, _, ok := strings.Cut(kv, "=")
			if !ok || k == "" || strings.ContainsRune(kv, 0) {
				t.Fatalf("bad entry %q", kv)
			}
		}
	})
}
