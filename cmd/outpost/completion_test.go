package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// generated runs `outpost ARGS...` in-process and returns its stdout.
func generated(t *testing.T, args ...string) string {
	t.Helper()
	var out, errb bytes.Buffer
	if code := run(args, &out, &errb); code != 0 || errb.Len() != 0 {
		t.Fatalf("outpost %v: exit %d, stderr %q", args, code, errb.String())
	}
	return out.String()
}

// writeScript writes s into a temporary file and returns its path.
func writeScript(t *testing.T, name, s string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// bashComplete loads the completion script into a real bash and calls
// its function as bash would for the command line words, the last being
// the word under the cursor; it returns the candidates, sorted.
func bashComplete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	const driver = `source "$1" || exit 9; shift
COMP_WORDS=("$@"); COMP_CWORD=$(( $# - 1 )); COMP_LINE="$*"; COMP_POINT=${#COMP_LINE}
_outpost outpost "${COMP_WORDS[COMP_CWORD]}" "${COMP_WORDS[COMP_CWORD-1]}"
printf '%s\n' "${COMPREPLY[@]}"`
	cmd := exec.Command("bash", append([]string{"--norc", "--noprofile", "-c", driver, "bash", script}, words...)...)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.Output()
	if err != nil || errb.Len() != 0 {
		t.Fatalf("bash completion of %q: %v, stderr %q", words, err, errb.String())
	}
	var got []string
	for _, l := range strings.Split(string(out), "\n") {
		if l != "" {
			got = append(got, l)
		}
	}
	slices.Sort(got)
	return got
}

func needBash(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		testdeps.Missing(t, "bash", "bash is not installed: cannot run the bash completion script")
	}
}

func TestBashCompletionCompletesCommandsFlagsAndValues(t *testing.T) {
	needBash(t)
	script := writeScript(t, "outpost.bash", generated(t, "completion", "bash"))
	for _, c := range []struct {
		words []string
		want  []string
	}{
		{[]string{"outpost", "ex"}, []string{"exec", "executor", "executors"}},
		{[]string{"outpost", "executor", "j"}, []string{"join"}},
		{[]string{"outpost", "relay", ""}, []string{"init", "migrate", "serve"}},
		{[]string{"outpost", "token", "r"}, []string{"revoke"}},
		{[]string{"outpost", "exec", "--sa"}, []string{"--sandbox"}},
		{[]string{"outpost", "exec", "-sa"}, nil}, // offered as --name; -name still parses
		{[]string{"outpost", "exec", "--sandbox", ""}, []string{"full-access", "read-only", "workspace-write"}},
		{[]string{"outpost", "exec", "-sandbox", "w"}, []string{"workspace-write"}},
		// "=" is a word of its own when COMP_WORDBREAKS holds it (the
		// default), else part of the flag's word.
		{[]string{"outpost", "exec", "--sandbox", "=", "r"}, []string{"read-only"}},
		{[]string{"outpost", "exec", "--sandbox", "="}, []string{"full-access", "read-only", "workspace-write"}},
		{[]string{"outpost", "exec", "--sandbox=r"}, []string{"--sandbox=read-only"}},
		{[]string{"outpost", "executor", "doctor", "--sandbox", "f"}, []string{"full-access"}},
		{[]string{"outpost", "executor", "join", "--log-format", ""}, []string{"console", "json"}},
		{[]string{"outpost", "executor", "serve", "--cgroups", ""}, []string{"auto", "off"}},
		// A flag taking a free value, a bool flag, and after "--".
		{[]string{"outpost", "exec", "--cwd", "--"}, nil},
		{[]string{"outpost", "exec", "--tty", "--ti"}, []string{"--timeout"}},
		{[]string{"outpost", "exec", "--", "--sa"}, nil},
		{[]string{"outpost", "cp", "--t"}, []string{"--target", "--token"}},
		{[]string{"outpost", "cp", "-r"}, []string{"-r"}},
		{[]string{"outpost", "completion", ""}, []string{"bash", "fish", "powershell", "zsh"}},
		{[]string{"outpost", "help", "exe"}, []string{"exec", "executor", "executors"}},
		{[]string{"outpost", "nope", ""}, nil},
	} {
		if got := bashComplete(t, script, c.words...); !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.words, got, c.want)
		}
	}
}

// Every flag of every command, as the command itself registers it, is
// completed for that command, and nothing else is.
func TestCompletionAndManPageCoverEveryFlagOfEveryCommand(t *testing.T) {
	cmds, err := describeAll()
	if err != nil {
		t.Fatal(err)
	}
	byPath := map[string]commandInfo{}
	for _, c := range cmds {
		byPath[c.path] = c
	}
	// Known flags, literally, so that the test cannot pass on an empty
	// description.
	for path, want := range map[string][]string{
		"exec":          {"--sandbox", "--target", "--relay", "--executor", "--token", "--tty"},
		"cp":            {"-r", "-q", "--sandbox"},
		"executor join": {"--relay", "--max-handshakes-per-session", "--memory-max", "--log-level"},
		"token create":  {"--join", "--client", "--state-dir"},
		"relay serve":   {"--listen", "--drain-timeout"},
	} {
		var have []string
		for _, f := range byPath[path].flags {
			have = append(have, f.dashed())
		}
		for _, w := range want {
			if !slices.Contains(have, w) {
				t.Errorf("outpost %s: %s not described (have %q)", path, w, have)
			}
		}
	}
	if i := slices.IndexFunc(byPath["exec"].flags, func(f flagInfo) bool { return f.name == "sandbox" }); i < 0 || !slices.Equal(byPath["exec"].flags[i].choices, sandboxModes) {
		t.Errorf("exec --sandbox: choices not described")
	}

	man := generated(t, "man")
	sections := strings.Split(man, "\n.SS ")
	needBash(t)
	script := writeScript(t, "outpost.bash", generated(t, "completion", "bash"))
	for _, c := range cmds {
		var want []string
		for _, f := range c.flags {
			want = append(want, f.dashed())
		}
		slices.Sort(want)
		words := append(append([]string{"outpost"}, strings.Fields(c.path)...), "-")
		if got := bashComplete(t, script, words...); !slices.Equal(got, want) {
			t.Errorf("bash: outpost %s -<TAB>: got %q, want %q", c.path, got, want)
		}
		i := slices.IndexFunc(sections, func(s string) bool { return strings.HasPrefix(s, `"`+roff("outpost "+c.path)+`"`+"\n") })
		if i < 0 {
			t.Errorf("man: no section for outpost %s", c.path)
			continue
		}
		for _, f := range c.flags {
			if !strings.Contains(sections[i], "\n.B "+roff(f.dashed())+"\n") && !strings.Contains(sections[i], "\n.BI "+roff(f.dashed())+` "`) {
				t.Errorf("man: outpost %s: %s missing", c.path, f.dashed())
			}
		}
	}
}

func TestManPageRendersWithoutWarnings(t *testing.T) {
	man := generated(t, "man")
	for _, want := range []string{"\n.TH OUTPOST 1 ", "\n.SH NAME\noutpost \\- ", "\n.SH SYNOPSIS\n", "\n.SH DESCRIPTION\n", "\n.SH COMMANDS\n", "\n.SH FILES\n", "\n.SH EXIT STATUS\n"} {
		if !strings.Contains(man, want) {
			t.Errorf("man page lacks %q", want)
		}
	}
	if strings.Contains(man, "OUTPOST_TOKEN=") || strings.Contains(man, "opt_") {
		t.Errorf("man page shows a token")
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		testdeps.Missing(t, "groff", "groff is not installed: structure checked, rendering not")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(man)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) != 0 {
		t.Fatalf("groff -ww: %v\n%s", err, out)
	}
	// And as a reader sees it: every command's name, no raw escapes.
	cmd = exec.Command(groff, "-man", "-Tascii")
	cmd.Stdin = strings.NewReader(man)
	text, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	plain := strings.Join(strings.Fields(string(regexpBackspace(text))), " ")
	for _, want := range []string{"outpost executor join", "--sandbox", "read-only, workspace-write, full-access", "executor, relay, target, token"} {
		if !strings.Contains(plain, want) {
			t.Errorf("rendered page lacks %q", want)
		}
	}
	if strings.Contains(plain, `\[`) || strings.Contains(plain, `\-`) {
		t.Errorf("rendered page shows raw escapes")
	}
}

// regexpBackspace drops grotty's overstriking (X\bX bold, _\bX underline).
func regexpBackspace(b []byte) []byte {
	var out []byte
	for i := 0; i < len(b); i++ {
		if i+1 < len(b) && b[i+1] == '\b' {
			i++
			continue
		}
		out = append(out, b[i])
	}
	return out
}

func TestZshAndFishCompletionScriptsParseAndComplete(t *testing.T) {
	zsh := writeScript(t, "_outpost", generated(t, "completion", "zsh"))
	fish := writeScript(t, "outpost.fish", generated(t, "completion", "fish"))
	t.Run("zsh", func(t *testing.T) {
		if _, err := exec.LookPath("zsh"); err != nil {
			testdeps.Missing(t, "zsh", "zsh is not installed (apt-get install zsh): its script is not checked")
		}
		if out, err := exec.Command("zsh", "-n", zsh).CombinedOutput(); err != nil {
			t.Fatalf("zsh -n: %v\n%s", err, out)
		}
		// The function against stand-ins for zsh's completion system,
		// which print what they were asked to offer.
		const driver = `compdef() { :; }
_describe() { print -rl -- "${(@P)4}" } # -t TAG DESCR ARRAY
_arguments() { print -rl -- "$@" }
source "$1"; shift
words=("$@"); CURRENT=$#
_outpost`
		for _, c := range []struct {
			words []string
			want  string
		}{
			{[]string{"outpost", "ex"}, "executor:"},
			{[]string{"outpost", "executor", "j"}, "join:join a relay"},
			{[]string{"outpost", "exec", "--sa"}, "--sandbox=[sandbox\\: read-only, workspace-write or full-access (default\\: none)]:string:(read-only workspace-write full-access)"},
			{[]string{"outpost", "cp", ""}, "-r[copy directories recursively]"},
		} {
			out, err := exec.Command("zsh", append([]string{"-f", "-c", driver, "zsh", zsh}, c.words...)...).CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Errorf("zsh %q: %v, output lacks %q:\n%s", c.words, err, c.want, out)
			}
		}
	})
	t.Run("fish", func(t *testing.T) {
		if _, err := exec.LookPath("fish"); err != nil {
			testdeps.Missing(t, "fish", "fish is not installed (apt-get install fish): its script is not checked")
		}
		if out, err := exec.Command("fish", "-n", fish).CombinedOutput(); err != nil {
			t.Fatalf("fish -n: %v\n%s", err, out)
		}
		for _, c := range []struct{ line, want string }{
			{"outpost ex", "executors\t"},
			{"outpost executor j", "join\t"},
			{"outpost exec --sa", "--sandbox\t"},
			{"outpost exec --sandbox ", "workspace-write\t"},
			{"outpost cp -", "-r\t"},
		} {
			cmd := exec.Command("fish", "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, fish, c.line)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), c.want) {
				t.Errorf("fish %q: %v, output lacks %q:\n%s", c.line, err, c.want, out)
			}
		}
	})
}

// Describing a command runs nothing: every command stops in parseArgs.
func TestDescribeReachesEveryCommandsFlagsWithoutRunningIt(t *testing.T) {
	for _, c := range commandTable() {
		if fs := describe(c); fs == nil {
			t.Errorf("outpost %s never reached parseArgs", c.path)
		} else if want := "outpost " + c.path; fs.Name() != want {
			t.Errorf("outpost %s: FlagSet named %q, want %q", c.path, fs.Name(), want)
		}
	}
	if describeHook.Load() != nil {
		t.Fatal("the describe hook outlived describe")
	}
}
