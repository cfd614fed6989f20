package engine_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// --- ChildEnv ------------------------------------------------------------

var baseEnv = []string{
	"PATH=/usr/bin:/bin",
	"HOME=/home/u",
	"LANG=C.UTF-8",
	"USER=u",
	"EDITOR=vi",
	"AWS_REGION=eu-west-1",
	"aws_profile=dev",
	"OPENAI_API_KEY=sk-1",
	"github_token=ghp",
	"Db_Secret=pw",
	"MONKEY=banana",
	"NOT_A_VAR", // no '=': skipped
	"=C:=C:\\x", // no name: skipped
	"EMPTY=",    // empty value: kept
	"EQ=a=b=c",  // '=' in the value: kept whole
	"npm_config_//registry.npmjs.org/:_authToken=npm_x",
}

func TestChildEnvWithoutPolicyIsExactlyOverlay(t *testing.T) {
	got, err := engine.ChildEnv(nil, map[string]string{"B": "2", "A": "1", "PATH": "/x"}, baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A=1", "B=2", "PATH=/x"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}

	got, err = engine.ChildEnv(nil, nil, baseEnv)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 {
		t.Fatalf("nil policy and nil overlay inherited %q", got)
	}
}

func TestChildEnvWithoutPolicyKeepsSecretsTheClientSent(t *testing.T) {
	// Default excludes filter what is inherited, not what the client asks for.
	got, err := engine.ChildEnv(nil, map[string]string{"API_KEY": "k"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"API_KEY=k"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestChildEnvAppliesPolicyStepsInOrder(t *testing.T) {
	cases := []struct {
		name    string
		policy  protocol.EnvPolicy
		overlay map[string]string
		want    []string
	}{
		{
			name:   "inherit all drops default excludes",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritAll},
			want:   []string{"AWS_REGION=eu-west-1", "EDITOR=vi", "EMPTY=", "EQ=a=b=c", "HOME=/home/u", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "USER=u", "aws_profile=dev"},
		},
		{
			name:   "inherit all ignoring default excludes",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritAll, IgnoreDefaultExcludes: true},
			want: []string{"AWS_REGION=eu-west-1", "Db_Secret=pw", "EDITOR=vi", "EMPTY=", "EQ=a=b=c", "HOME=/home/u", "LANG=C.UTF-8", "MONKEY=banana",
				"OPENAI_API_KEY=sk-1", "PATH=/usr/bin:/bin", "USER=u", "aws_profile=dev", "github_token=ghp", "npm_config_//registry.npmjs.org/:_authToken=npm_x"},
		},
		{
			name:   "inherit core",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritCore},
			want:   []string{"HOME=/home/u", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "USER=u"},
		},
		{
			name:   "inherit none",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritNone},
			want:   []string{},
		},
		{
			name:    "inherit none with set and overlay",
			policy:  protocol.EnvPolicy{Inherit: protocol.InheritNone, Set: map[string]string{"A": "1"}},
			overlay: map[string]string{"B": "2"},
			want:    []string{"A=1", "B=2"},
		},
		{
			name:   "exclude globs are case-insensitive",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritAll, Exclude: []string{"aws_*", "E?ITOR", "*Q"}},
			want:   []string{"EMPTY=", "HOME=/home/u", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "USER=u"},
		},
		{
			name:   "exclude with a character class",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritCore, Exclude: []string{"[hl]*"}},
			want:   []string{"PATH=/usr/bin:/bin", "USER=u"},
		},
		{
			name:   "exclude an exact name",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritCore, Exclude: []string{"path"}},
			want:   []string{"HOME=/home/u", "LANG=C.UTF-8", "USER=u"},
		},
		{
			name:   "set adds and replaces",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritCore, Set: map[string]string{"HOME": "/other", "NEW": "v"}},
			want:   []string{"HOME=/other", "LANG=C.UTF-8", "NEW=v", "PATH=/usr/bin:/bin", "USER=u"},
		},
		{
			name:   "set is not subject to excludes",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritNone, Exclude: []string{"MY_*"}, Set: map[string]string{"MY_TOKEN": "t", "MY_VAR": "v"}},
			want:   []string{"MY_TOKEN=t", "MY_VAR=v"},
		},
		{
			name:   "includeOnly keeps matching names",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritAll, IncludeOnly: []string{"PATH", "l*", "aws_*"}},
			want:   []string{"AWS_REGION=eu-west-1", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "aws_profile=dev"},
		},
		{
			name:   "includeOnly applies after set",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritCore, Set: map[string]string{"KEEP_ME": "1", "DROP_ME": "2"}, IncludeOnly: []string{"KEEP_*", "PATH"}},
			want:   []string{"KEEP_ME=1", "PATH=/usr/bin:/bin"},
		},
		{
			name:   "includeOnly does not bring back excluded names",
			policy: protocol.EnvPolicy{Inherit: protocol.InheritAll, IncludeOnly: []string{"*KEY*", "PATH"}},
			want:   []string{"PATH=/usr/bin:/bin"},
		},
		{
			name:    "overlay is laid over includeOnly",
			policy:  protocol.EnvPolicy{Inherit: protocol.InheritCore, IncludeOnly: []string{"PATH"}},
			overlay: map[string]string{"EXTRA": "x"},
			want:    []string{"EXTRA=x", "PATH=/usr/bin:/bin"},
		},
		{
			name:    "overlay wins over set and inherited values",
			policy:  protocol.EnvPolicy{Inherit: protocol.InheritCore, Set: map[string]string{"HOME": "/set", "A": "set"}},
			overlay: map[string]string{"HOME": "/overlay", "A": "overlay"},
			want:    []string{"A=overlay", "HOME=/overlay", "LANG=C.UTF-8", "PATH=/usr/bin:/bin", "USER=u"},
		},
		{
			name:    "overlay wins over excludes",
			policy:  protocol.EnvPolicy{Inherit: protocol.InheritNone, Exclude: []string{"*"}},
			overlay: map[string]string{"GITHUB_TOKEN": "mine"},
			want:    []string{"GITHUB_TOKEN=mine"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			policy := c.policy
			got, err := engine.ChildEnv(&policy, c.overlay, baseEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Fatalf("got  %q\nwant %q", got, c.want)
			}
		})
	}
}

func TestChildEnvDefaultExcludesAreCaseInsensitiveSubstrings(t *testing.T) {
	dropped := []string{
		"API_KEY", "api_key", "Api_Key", "KEY", "keyring", "MONKEY", "SSH_AUTH_SOCK_KEY",
		"AWS_SECRET_ACCESS_KEY", "secret", "client_secret_x",
		"GITHUB_TOKEN", "token", "xTokenx",
		// '/' is legal in a name; a glob '*' must still cross it.
		"npm_config_//registry.npmjs.org/:_authToken",
		"a/b/SECRET/c",
	}
	kept := []string{"PATH", "KE_Y", "TOKE", "SECRE", "K", "a/b"}
	var base []string
	for _, n := range append(append([]string(nil), dropped...), kept...) {
		base = append(base, n+"=v")
	}
	got, err := engine.ChildEnv(&protocol.EnvPolicy{Inherit: protocol.InheritAll}, nil, base)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range kept {
		want = append(want, n+"=v")
	}
	sort.Strings(want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}

	got, err = engine.ChildEnv(&protocol.EnvPolicy{Inherit: protocol.InheritAll, IgnoreDefaultExcludes: true}, nil, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(base) {
		t.Fatalf("ignoreDefaultExcludes kept %d of %d variables: %q", len(got), len(base), got)
	}
}

func TestChildEnvExcludeGlobCrossesSlash(t *testing.T) {
	policy := &protocol.EnvPolicy{Inherit: protocol.InheritAll, IgnoreDefaultExcludes: true, Exclude: []string{"npm_config_*"}}
	got, err := engine.ChildEnv(policy, nil, []string{"npm_config_//registry.npmjs.org/:_authToken=x", "npm_config_cache=/c", "PATH=/bin"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"PATH=/bin"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestChildEnvIncludeOnlyGlobCrossesSlash(t *testing.T) {
	policy := &protocol.EnvPolicy{Inherit: protocol.InheritAll, IgnoreDefaultExcludes: true, IncludeOnly: []string{"A*Z"}}
	got, err := engine.ChildEnv(policy, nil, []string{"A/Z=1", "A/B/Z=2", "AZ=3", "B=4"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"A/B/Z=2", "A/Z=1", "AZ=3"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("got %q, want %q", got, want)
	}
}

func TestChildEnvRejectsUnknownInherit(t *testing.T) {
	for _, inherit := range []protocol.EnvPolicyInherit{"bogus", "ALL", "everything"} {
		_, err := engine.ChildEnv(&protocol.EnvPolicy{Inherit: inherit}, nil, baseEnv)
		if err == nil || !strings.Contains(err.Error(), "inherit") {
			t.Errorf("inherit %q: err = %v, want an inherit error", inherit, err)
		}
	}
}

func TestChildEnvRejectsBadGlobs(t *testing.T) {
	cases := []protocol.EnvPolicy{
		{Inherit: protocol.InheritAll, Exclude: []string{"["}},
		{Inherit: protocol.InheritAll, Exclude: []string{"OK_*", "BAD[a-"}},
		{Inherit: protocol.InheritAll, Exclude: []string{`TRAILING\`}},
		{Inherit: protocol.InheritAll, IncludeOnly: []string{"[]"}},
		// Validated even when nothing would be matched against them.
		{Inherit: protocol.InheritNone, Exclude: []string{"["}},
		{Inherit: protocol.InheritNone, IncludeOnly: []string{"x["}},
	}
	for _, p := range cases {
		policy := p
		_, err := engine.ChildEnv(&policy, nil, baseEnv)
		if err == nil || !strings.Contains(err.Error(), "pattern") {
			t.Errorf("policy %+v: err = %v, want a bad pattern error", p, err)
		}
	}
}

func TestChildEnvRejectsInvalidNamesAndValues(t *testing.T) {
	cases := []struct {
		name    string
		policy  *protocol.EnvPolicy
		overlay map[string]string
	}{
		{"equals in overlay name", nil, map[string]string{"A=B": "v"}},
		{"NUL in overlay name", nil, map[string]string{"A\x00B": "v"}},
		{"NUL in overlay value", nil, map[string]string{"A": "v\x00w"}},
		{"empty overlay name", nil, map[string]string{"": "v"}},
		{"equals in set name", &protocol.EnvPolicy{Inherit: protocol.InheritNone, Set: map[string]string{"=X": "v"}}, nil},
		{"NUL in set name", &protocol.EnvPolicy{Inherit: protocol.InheritNone, Set: map[string]string{"X\x00": "v"}}, nil},
		{"NUL in set value", &protocol.EnvPolicy{Inherit: protocol.InheritNone, Set: map[string]string{"X": "\x00"}}, nil},
		{"equals in overlay name under a policy", &protocol.EnvPolicy{Inherit: protocol.InheritCore}, map[string]string{"PATH=": "v"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := engine.ChildEnv(c.policy, c.overlay, baseEnv)
			if err == nil {
				t.Fatalf("accepted: %q", got)
			}
		})
	}
}

func TestChildEnvOutputIsSortedAndUnique(t *testing.T) {
	overlay := map[string]string{}
	for _, n := range []string{"zeta", "Alpha", "beta", "_x", "A", "a", "B1", "B10", "B2", "PATH"} {
		overlay[n] = "v"
	}
	for _, policy := range []*protocol.EnvPolicy{nil, {Inherit: protocol.InheritAll}} {
		for i := 0; i < 10; i++ { // map order varies from run to run
			got, err := engine.ChildEnv(policy, overlay, baseEnv)
			if err != nil {
				t.Fatal(err)
			}
			if !sort.StringsAreSorted(got) {
				t.Fatalf("not sorted: %q", got)
			}
			seen := map[string]bool{}
			for _, kv := range got {
				name, _, _ := strings.Cut(kv, "=")
				if seen[name] {
					t.Fatalf("%s twice in %q", name, got)
				}
				seen[name] = true
			}
		}
	}
}

func TestChildEnvDoesNotModifyItsInputs(t *testing.T) {
	policy := &protocol.EnvPolicy{Inherit: protocol.InheritAll, Exclude: []string{"A*"}, Set: map[string]string{"S": "1"}, IncludeOnly: []string{"*"}}
	overlay := map[string]string{"O": "1"}
	base := append([]string(nil), baseEnv...)
	if _, err := engine.ChildEnv(policy, overlay, base); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(base, baseEnv) || len(overlay) != 1 || len(policy.Set) != 1 || !reflect.DeepEqual(policy.Exclude, []string{"A*"}) {
		t.Fatalf("inputs modified: base %q overlay %v policy %+v", base, overlay, policy)
	}
}
