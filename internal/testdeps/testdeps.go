// Package testdeps decides, for a test whose dependency is missing, whether
// to skip or to fail.
//
// Many tests need something outside Go — an etcd binary, a Docker engine,
// the real codex releases, zsh, a kernel with Landlock — and skip, saying
// what is missing, where it is not there: a developer's `make test` stays
// green without them. That makes a green CI run prove nothing about those
// paths. OUTPOST_REQUIRE names the dependency classes that must be present
// (a comma-separated list of the names in Classes, or "all"); for those,
// Missing fails the test with the message it would have skipped with.
// .ci/run sets it for everything it installs.
//
// Only a missing dependency goes through Missing. A set-up step that fails
// where its dependency is present (a port that cannot be rebound, a
// directory that cannot be made) is a test failure everywhere, and tests
// call t.Fatal for it; skips that are not about a dependency (testing.Short,
// not running as root, another architecture) stay plain skips.
package testdeps

import (
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
)

// Env is the environment variable naming the required classes.
const Env = "OUTPOST_REQUIRE"

// All, as the value (or one element) of Env, requires every class.
const All = "all"

// Classes are the dependency classes a test may be missing, with what each
// is and where it comes from. A class named in Env that is not here is an
// error (a typo must not make the requirement silently empty).
var Classes = map[string]string{
	"etcd":          "etcd and etcdctl on $PATH (apt-get install etcd-server etcd-client): internal/etcdtest, the relay store and cluster, e2e's cluster",
	"docker":        "a running Docker engine, its socket and docker-compose (apt-get install docker.io docker-compose): e2e",
	"busybox":       "busybox-static (apt-get install busybox-static): e2e's image and VM",
	"codex":         "the real codex releases of internal/peers.CodexVersions (scripts/install-codex.sh): conformance",
	"mcp-inspector": "node and the official MCP Inspector CLI, npm @modelcontextprotocol/inspector-cli (scripts/install-mcp-inspector.sh): cmd/outpost's outpost mcp tests",
	"bash":          "bash: cmd/outpost's completion test",
	"zsh":           "zsh (apt-get install zsh): cmd/outpost's completion test",
	"fish":          "fish (apt-get install fish): cmd/outpost's completion test",
	"groff":         "groff (apt-get install groff-base): cmd/outpost's man page test",
	"qemu":          "qemu-system-x86_64 and the VM kernel scripts/vm-kernel.sh fetches: e2e's VM test",
	"go":            "the go tool on $PATH: client's module graph test",
	"git":           "a git checkout and git, for builds stamped with VCS information: cmd/outpost's version test",
	"sandbox":       "a kernel that can enforce the sandbox (Landlock and seccomp): sandbox, executor, client, bridge, cmd/outpost",
	"landlock-net":  "Landlock ABI 4 or later (TCP rules): sandbox",
	"ia32":          "the kernel's i386 compat syscalls (int $0x80), to test that seccomp filters them: sandbox",
	"userns":        "user and mount namespaces for sandboxed commands: executor, cmd/outpost, conformance",
	"cgroup":        "a writable cgroup v2 for per-command cgroups: cgroup, engine, executor, cmd/outpost",
	"cgroup-limits": "the memory and pids controllers in that cgroup v2 (the e2e VM has them): cgroup",
	"netns":         "root, iproute2 and /dev/net/tun for network namespaces: bench/wan/netem",
	"wine":          "Wine and the MinGW-w64 binutils (apt-get install wine64 binutils-mingw-w64-x86-64): the Windows binaries' tests under internal/wine",
}

// Names returns the known classes, sorted.
func Names() []string {
	names := make([]string, 0, len(Classes))
	for n := range Classes {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Parse reads a value of Env: the set of required classes. Blanks around
// names and empty elements are ignored; "all" stands for every class; an
// unknown name is an error naming the known ones.
func Parse(value string) (map[string]bool, error) {
	req := map[string]bool{}
	var unknown []string
	for _, n := range strings.Split(value, ",") {
		n = strings.TrimSpace(n)
		switch {
		case n == "":
		case n == All:
			for c := range Classes {
				req[c] = true
			}
		case Classes[n] != "":
			req[n] = true
		default:
			unknown = append(unknown, n)
		}
	}
	if len(unknown) > 0 {
		return nil, fmt.Errorf("%s names unknown dependency classes %q; known: %s, or %s",
			Env, unknown, strings.Join(Names(), ","), All)
	}
	return req, nil
}

// Required reports whether Env requires class. It panics on a class that
// is not in Classes (a mistake in a test, not in the environment); an Env
// that does not parse requires everything, so that the typo fails tests
// rather than skipping them (Missing reports it).
func Required(class string) bool {
	if Classes[class] == "" {
		panic(fmt.Sprintf("testdeps: unknown dependency class %q", class))
	}
	req, err := Parse(os.Getenv(Env))
	return err != nil || req[class]
}

// Missing is called where a test finds class missing, in place of t.Skipf
// with the same format and arguments: it skips the test, or fails it if
// Env requires class. Like t.Skipf and t.Fatalf it ends the test's
// goroutine (with a real testing.TB).
func Missing(t testing.TB, class, format string, args ...any) {
	t.Helper()
	if Classes[class] == "" {
		t.Fatalf("testdeps: unknown dependency class %q (known: %s)", class, strings.Join(Names(), ","))
		return
	}
	msg := fmt.Sprintf(format, args...)
	req, err := Parse(os.Getenv(Env))
	switch {
	case err != nil:
		t.Fatalf("%s [missing %s; %v]", msg, class, err)
	case req[class]:
		t.Fatalf("%s [missing %s, which %s requires]", msg, class, Env)
	default:
		t.Skipf("%s [missing %s; %s=%s makes this a failure]", msg, class, Env, class)
	}
}
