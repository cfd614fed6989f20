package testdeps

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// recorder is a testing.TB that records what Missing asked of it instead
// of ending a goroutine; only Helper, Fatalf and Skipf are called (the
// embedded nil TB panics on anything else, which would be a finding).
type recorder struct {
	testing.TB
	fatal, skip string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.fatal = fmt.Sprintf(format, args...)
}
func (r *recorder) Skipf(format string, args ...any) {
	r.skip = fmt.Sprintf(format, args...)
}

func missing(t *testing.T, env, class string) *recorder {
	t.Helper()
	t.Setenv(Env, env)
	r := &recorder{}
	Missing(r, class, "etcd not installed: %s", "apt-get install etcd-server")
	if (r.fatal == "") == (r.skip == "") {
		t.Fatalf("%s=%q, class %s: fatal %q, skip %q: want exactly one", Env, env, class, r.fatal, r.skip)
	}
	return r
}

func TestMissingFailsWhereRequiredAndSkipsElsewhere(t *testing.T) {
	const msg = "etcd not installed: apt-get install etcd-server"
	for _, c := range []struct {
		env      string
		class    string
		wantFail bool
	}{
		{"", "etcd", false},
		{"etcd", "etcd", true},
		{" docker , etcd ", "etcd", true},
		{"docker,codex", "etcd", false},
		{"all", "etcd", true},
		{"all", "cgroup-limits", true},
		{"etcd", "codex", false},
		{",,", "etcd", false},
		{"etdc", "etcd", true}, // a typo must not make the requirement empty
	} {
		r := missing(t, c.env, c.class)
		if got := r.fatal != ""; got != c.wantFail {
			t.Errorf("%s=%q, class %s: fatal %q, skip %q; want fail=%v", Env, c.env, c.class, r.fatal, r.skip, c.wantFail)
			continue
		}
		// The message is the skip's, either way, and says which class.
		got := r.fatal + r.skip
		if !strings.HasPrefix(got, msg+" [missing "+c.class) {
			t.Errorf("%s=%q: message %q lacks %q and the class", Env, c.env, got, msg)
		}
	}
}

func TestMissingNamesTheTypoInTheRequirement(t *testing.T) {
	r := missing(t, "etcd,dockr", "docker")
	if !strings.Contains(r.fatal, `"dockr"`) || !strings.Contains(r.fatal, "known:") {
		t.Fatalf("fatal %q does not name the unknown class and the known ones", r.fatal)
	}
}

func TestMissingRefusesAnUnknownClass(t *testing.T) {
	r := missing(t, "", "etc")
	if r.fatal == "" || !strings.Contains(r.fatal, `"etc"`) {
		t.Fatalf("unknown class: fatal %q, skip %q", r.fatal, r.skip)
	}
}

func TestRequired(t *testing.T) {
	t.Setenv(Env, "qemu,busybox")
	if !Required("qemu") || !Required("busybox") || Required("etcd") {
		t.Fatal("Required does not follow the list")
	}
	t.Setenv(Env, "all")
	for _, c := range Names() {
		if !Required(c) {
			t.Fatalf("all does not require %s", c)
		}
	}
	defer func() {
		if recover() == nil {
			t.Fatal("Required of an unknown class did not panic")
		}
	}()
	Required("nonsense")
}

func TestParse(t *testing.T) {
	req, err := Parse("all")
	if err != nil || len(req) != len(Classes) {
		t.Fatalf("all: %v, %v", req, err)
	}
	if req, err := Parse(""); err != nil || len(req) != 0 {
		t.Fatalf("empty: %v, %v", req, err)
	}
	if _, err := Parse("etcd,,zsh ,"); err != nil {
		t.Fatal(err)
	}
	if _, err := Parse("etcd,ETCD"); err == nil {
		t.Fatal("names are case-sensitive: ETCD accepted")
	}
}

// Every class says what it is, and none is the word that means all.
func TestClassesAreDescribed(t *testing.T) {
	for _, c := range Names() {
		if strings.TrimSpace(Classes[c]) == "" || c == All || strings.ContainsAny(c, ", ") {
			t.Errorf("class %q: %q", c, Classes[c])
		}
	}
}

// The same through a real test binary: this one, re-executed to run
// TestHelperMissingEtcd, fails under OUTPOST_REQUIRE=etcd and skips
// without it; either way nothing after Missing runs (the helper's t.Error
// would turn the skip into a failure).
func TestMissingFailsARealTestUnderTheRequirement(t *testing.T) {
	for _, c := range []struct {
		env  string
		want string
	}{
		{"etcd", "--- FAIL: TestHelperMissingEtcd"},
		{"codex", "--- SKIP: TestHelperMissingEtcd"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperMissingEtcd$", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"=1", Env+"="+c.env)
		out, err := cmd.CombinedOutput()
		failed := err != nil
		if failed != (c.env == "etcd") || !strings.Contains(string(out), c.want) {
			t.Errorf("%s=%s: err %v, output lacks %q:\n%s", Env, c.env, err, c.want, out)
		}
		if !strings.Contains(string(out), "etcd not installed") {
			t.Errorf("%s=%s: the message is lost:\n%s", Env, c.env, out)
		}
	}
}

const helperEnv = "OUTPOST_TESTDEPS_HELPER"

func TestHelperMissingEtcd(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper for TestMissingFailsARealTestUnderTheRequirement")
	}
	Missing(t, "etcd", "etcd not installed: %s", "apt-get install etcd-server")
	t.Error("Missing returned")
}
