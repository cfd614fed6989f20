package engine

import (
	"fmt"
	"path"
	"sort"
	"strings"

	"github.com/outpost-exec/outpost/protocol"
)

// coreEnvVars is what EnvPolicy inherit "core" keeps of the executor's
// environment (codex's UNIX_CORE_ENV_VARS).
var coreEnvVars = []string{"PATH", "SHELL", "TMPDIR", "TEMP", "TMP", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LOGNAME", "USER"}

// defaultEnvExcludes keep secrets out of children unless the policy says
// ignoreDefaultExcludes.
var defaultEnvExcludes = []string{"*KEY*", "*SECRET*", "*TOKEN*"}

// ChildEnv computes a child's environment. Without a policy it is exactly
// overlay; with one it is built from base (the executor's own environment,
// KEY=VALUE) as EnvPolicy documents, and overlay is laid over the result.
// The result is sorted by name.
func ChildEnv(policy *protocol.EnvPolicy, overlay map[string]string, base []string) ([]string, error) {
	env := map[string]string{}
	if policy != nil {
		for _, p := range append(append([]string(nil), policy.Exclude...), policy.IncludeOnly...) {
			if _, err := path.Match(strings.ToUpper(p), ""); err != nil {
				return nil, fmt.Errorf("envPolicy: bad pattern %q: %w", p, err)
			}
		}
		switch policy.Inherit {
		case protocol.InheritAll:
			for _, kv := range base {
				if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
					env[k] = v
				}
			}
		case protocol.InheritCore:
			for _, kv := range base {
				if k, v, ok := strings.Cut(kv, "="); ok {
					for _, c := range coreEnvVars {
						if strings.EqualFold(k, c) {
							env[k] = v
						}
					}
				}
			}
		case protocol.InheritNone:
		default:
			return nil, fmt.Errorf("envPolicy.inherit: unknown value %q (want all, core or none)", policy.Inherit)
		}
		if !policy.IgnoreDefaultExcludes {
			dropMatching(env, defaultEnvExcludes)
		}
		dropMatching(env, policy.Exclude)
		for k, v := range policy.Set {
			env[k] = v
		}
		if len(policy.IncludeOnly) > 0 {
			for k := range env {
				if !matchAny(k, policy.IncludeOnly) {
					delete(env, k)
				}
			}
		}
	}
	for k, v := range overlay {
		env[k] = v
	}
	out := make([]string, 0, len(env))
	for k, v := range env {
		if k == "" || strings.ContainsAny(k, "=\x00") || strings.ContainsRune(v, 0) {
			return nil, fmt.Errorf("env: invalid variable %q (names must be non-empty without '=' or NUL; values without NUL)", k)
		}
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out, nil
}

func dropMatching(env map[string]string, patterns []string) {
	for k := range env {
		if matchAny(k, patterns) {
			delete(env, k)
		}
	}
}

// matchAny matches name against case-insensitive globs (* and ?).
// path.Match's * and ? stop at '/', which a name may hold
// (npm_config_//registry.npmjs.org/:_authToken), so '/' is swapped for
// NUL, which no name holds, on both sides.
func matchAny(name string, patterns []string) bool {
	up := strings.ReplaceAll(strings.ToUpper(name), "/", "\x00")
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ReplaceAll(strings.ToUpper(p), "/", "\x00"), up); ok {
			return true
		}
	}
	return false
}
