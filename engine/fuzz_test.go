package engine

import (
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/protocol"
)

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
