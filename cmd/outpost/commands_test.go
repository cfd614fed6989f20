package main

import (
	"bytes"
	"debug/buildinfo"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// Help, for the program, a group or any command, exits 0 with all of it
// on stdout and nothing on stderr.
func TestEveryHelpExitsZeroOnStdoutOnly(t *testing.T) {
	cases := [][]string{{"-h"}, {"--help"}, {"help"}, {"executor", "-h"}, {"help", "executor"}, {"help", "token"}, {"-h", "exec"}}
	for _, c := range commandTable() {
		cases = append(cases, append(strings.Fields(c.path), "-h"), append(strings.Fields(c.path), "--help"))
	}
	for _, args := range cases {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != 0 || out.Len() == 0 || errb.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %d bytes, stderr %q", args, code, out.Len(), errb.String())
		}
	}
	// outpost help exec is outpost exec --help.
	var help, direct, errb bytes.Buffer
	run([]string{"help", "exec"}, &help, &errb)
	run([]string{"exec", "--help"}, &direct, &errb)
	if help.String() != direct.String() || !strings.Contains(help.String(), "-sandbox") {
		t.Errorf("help exec:\n%s\nexec --help:\n%s", help.String(), direct.String())
	}
	// The usage names every command of the table.
	var usage bytes.Buffer
	run([]string{"help"}, &usage, &errb)
	for _, c := range commandTable() {
		if !strings.Contains(usage.String(), "outpost "+c.path+" ") && !strings.HasSuffix(strings.TrimSpace(usage.String()), "outpost "+c.path) {
			t.Errorf("usage lacks outpost %s:\n%s", c.path, usage.String())
		}
	}
}

func TestUnknownCommandsAndMissingSubcommandsExitTwo(t *testing.T) {
	for _, args := range [][]string{{"relay"}, {"token"}, {"executors"}, {"executors", "nope"}, {"token", "nope"}, {"help", "nope"}, {"completion"}, {"completion", "tcsh"}, {"man", "extra"}, {"token", "revoke"}} {
		var out, errb bytes.Buffer
		if code := run(args, &out, &errb); code != exitUsage || errb.Len() == 0 || out.Len() != 0 {
			t.Errorf("%q: exit %d, stdout %q, stderr %d bytes", args, code, out.String(), errb.Len())
		}
	}
}

// outpost version, -v and --version print the version with the commit
// and its date from the binary's build info.
func TestVersionPrintsTheCommitAndDateFromTheBuildInfo(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "outpost")
	// The environment may say -buildvcs=false (GOFLAGS); this build must
	// record the checkout.
	build := exec.Command("go", "build", "-buildvcs=true", "-o", bin, ".")
	if out, err := build.CombinedOutput(); err != nil {
		testdeps.Missing(t, "git", "cannot build with VCS information here (not a git checkout, or no git): %v\n%s", err, out)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	var rev, at string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.time":
			at = s.Value
		}
	}
	if len(rev) < 12 || at == "" {
		t.Fatalf("the build recorded no commit: %v", bi.Settings)
	}
	var first string
	for _, arg := range []string{"version", "-v", "--version"} {
		cmd := exec.Command(bin, arg)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil || errb.Len() != 0 {
			t.Fatalf("%s: %v, stderr %q", arg, err, errb.String())
		}
		if !strings.HasPrefix(string(out), "outpost ") || !strings.Contains(string(out), "commit "+rev[:12]) || !strings.Contains(string(out), at) || !strings.Contains(string(out), bi.GoVersion) {
			t.Errorf("%s: %q lacks commit %s, date %s or %s", arg, out, rev[:12], at, bi.GoVersion)
		}
		if first == "" {
			first = string(out)
		} else if string(out) != first {
			t.Errorf("%s: %q, version printed %q", arg, out, first)
		}
	}
}

// --target names a direct executor; with --relay or --executor the
// command would be ambiguous, so it is refused as a usage error.
func TestTargetWithRelayOrExecutorIsAUsageError(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_EXECUTOR"} {
		unsetenv(t, name)
	}
	t.Setenv("XDG_CONFIG_HOME", t.TempDir())
	relayURL := "outpost://127.0.0.1:1#" + strings.Repeat("A", 43)
	for _, conflict := range [][]string{{"--relay", relayURL}, {"--executor", "build-1"}, {"--relay", relayURL, "--executor", "build-1"}} {
		for _, command := range []string{"exec", "bridge"} {
			marker := filepath.Join(t.TempDir(), "ran")
			args := append(append([]string{command, "--target", "tcp://127.0.0.1:1#" + strings.Repeat("A", 43)}, conflict...), "--listen", "ws://127.0.0.1:0")
			if command == "exec" {
				args = append(append([]string{command, "--target", "tcp://127.0.0.1:1#" + strings.Repeat("A", 43)}, conflict...), "--", "touch", marker)
			}
			var out, errb bytes.Buffer
			if code := run(args, &out, &errb); code != exitUsage || errb.Len() == 0 {
				t.Errorf("%q: exit %d, want %d (stderr %q)", args, code, exitUsage, errb.String())
			}
			if _, err := os.Stat(marker); err == nil {
				t.Errorf("%q: the command ran", args)
			}
		}
	}
}

// writeConfig writes the config file of a fresh config dir and returns
// its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	home := t.TempDir()
	t.Setenv("XDG_CONFIG_HOME", home)
	if err := os.MkdirAll(filepath.Join(home, "outpost"), 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(home, "outpost", "config")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// Unknown keys and lines without "=" in the config file are warned about
// once, by file, line and key, and never with a value.
func TestConfigFileWarnsOnceAboutUnknownKeysAndMalformedLinesWithoutValues(t *testing.T) {
	for _, name := range []string{"OUTPOST_RELAY", "OUTPOST_TARGET", "OUTPOST_TOKEN", "OUTPOST_EXECUTOR"} {
		unsetenv(t, name)
	}
	path := writeConfig(t, "# mine\n"+
		"token = opt_SECRET1\n"+
		"exector = build-1\n"+
		"\n"+
		"opt_SECRET2\n"+
		"opt_SECRET3xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx = x\n"+
		"relay=\n")
	lines := func(stderr string) map[string]string {
		m := map[string]string{}
		for _, l := range strings.Split(stderr, "\n") {
			if rest, ok := strings.CutPrefix(l, "outpost: "+path+":"); ok {
				n, _, _ := strings.Cut(rest, ":")
				if _, dup := m[n]; dup {
					t.Errorf("line %s warned twice:\n%s", n, stderr)
				}
				m[n] = rest
			}
		}
		return m
	}
	check := func(what, stderr string) {
		t.Helper()
		if strings.Contains(stderr, "SECRET") || strings.Contains(stderr, "build-1") {
			t.Errorf("%s: a value was printed:\n%s", what, stderr)
		}
		got := lines(stderr)
		if len(got) != 3 {
			t.Fatalf("%s: want warnings for lines 3, 5 and 6, got %q", what, got)
		}
		if !strings.Contains(got["3"], `"exector"`) {
			t.Errorf("%s: line 3 must name the key: %q", what, got["3"])
		}
		for _, n := range []string{"3", "5", "6"} {
			if !strings.Contains(got[n], "executor, relay, target, token") {
				t.Errorf("%s: line %s must list the known keys: %q", what, n, got[n])
			}
		}
	}
	// The real binary: exec runs here (the config names no executor),
	// warned; cp reads the file twice, and warns once.
	cmd := exec.Command(outpostBin, "exec", "--", "true")
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Run(); err != nil {
		t.Fatalf("exec: %v (stderr %q)", err, errb.String())
	}
	check("exec", errb.String())
	errb.Reset()
	cmd = exec.Command(outpostBin, "cp")
	cmd.Stderr = &errb
	cmd.Run()
	check("cp", errb.String())

	// In-process, each run warns on its own stderr.
	for i := range 2 {
		var out, errb bytes.Buffer
		run([]string{"cp"}, &out, &errb)
		check("run "+string(rune('1'+i)), errb.String())
	}

	// A well-formed file warns about nothing; neither does a command
	// that never reads it.
	writeConfig(t, "# fine\ntarget = tcp://127.0.0.1:1#x\nexecutor=\n")
	var out, errb2 bytes.Buffer
	run([]string{"cp"}, &out, &errb2)
	if strings.Contains(errb2.String(), "config:") {
		t.Errorf("a good config file was warned about:\n%s", errb2.String())
	}
	writeConfig(t, "bogus\n")
	errb2.Reset()
	run([]string{"version"}, &out, &errb2)
	if errb2.Len() != 0 {
		t.Errorf("version read the config file: %q", errb2.String())
	}
}

// An executor reports a version that names its build: the release, or
// 0.0.0-dev+COMMIT for a development build with the commit stamped.
func TestShortVersionNamesTheCommit(t *testing.T) {
	oldV, oldC := version, commit
	t.Cleanup(func() { version, commit = oldV, oldC })
	version, commit = "dev", "0123456789abcdef0123"
	if v := shortVersion(); v != "0.0.0-dev+0123456789ab" && !strings.HasPrefix(v, "0.0.0-dev+") {
		t.Errorf("dev build with a commit: %q", v)
	}
	version = "1.2.3"
	if v := shortVersion(); v != "1.2.3" {
		t.Errorf("release: %q", v)
	}
}
