package conformance

// codex starting its exec-server as a program over stdio: an
// environments.toml entry in codex's CODEX_HOME (include_local = false,
// as the README tells users, so a failure cannot fall back to running the
// command on the test's own machine), its program wrapped in a shell
// pipeline that copies each direction to a file — the stdio tap, read
// back after the run into the same wireTap the ws rows use.

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// shQuote quotes s for sh.
func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// stdioEnvironment writes CODEX_HOME/environments.toml naming argv (with
// env) as codex's only environment, wrapped so that what codex writes
// goes to dir/in.jsonl and what the program answers to dir/out.jsonl.
func stdioEnvironment(codexHome, dir string, argv []string, env []string) error {
	quoted := make([]string, len(argv))
	for i, a := range argv {
		quoted[i] = shQuote(a)
	}
	pipeline := fmt.Sprintf("tee -a %s | %s | tee -a %s", shQuote(filepath.Join(dir, "in.jsonl")), strings.Join(quoted, " "), shQuote(filepath.Join(dir, "out.jsonl")))
	var b strings.Builder
	b.WriteString("include_local = false\ndefault = \"remote\"\n\n[[environments]]\nid = \"remote\"\nprogram = \"/bin/sh\"\n")
	fmt.Fprintf(&b, "args = [\"-c\", %s]\n", tomlString(pipeline))
	if len(env) > 0 {
		b.WriteString("env = { ")
		for i, kv := range env {
			k, v, _ := strings.Cut(kv, "=")
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "%s = %s", k, tomlString(v))
		}
		b.WriteString(" }\n")
	}
	return os.WriteFile(filepath.Join(codexHome, "environments.toml"), []byte(b.String()), 0o600)
}

// tomlString is s as a TOML basic string (JSON's escapes are TOML's).
func tomlString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// loadStdioTap reads the two copies into a tap. The order between the two
// directions is lost (each keeps its own), which Requests and Methods do
// not need.
func loadStdioTap(t *testing.T, dir string) *wireTap {
	tap := &wireTap{start: time.Now(), limit: maxTapMessages, faults: map[string]bool{}}
	for _, f := range []struct{ name, dir string }{{"in.jsonl", toServer}, {"out.jsonl", toCodex}} {
		file, err := os.Open(filepath.Join(dir, f.name))
		if err != nil {
			t.Errorf("stdio tap: %v", err)
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Buffer(nil, 128<<20)
		for sc.Scan() {
			if line := sc.Bytes(); len(line) > 0 {
				tap.record(0, f.dir, line)
			}
		}
		file.Close()
	}
	if dir := os.Getenv(captureEnv); dir != "" {
		if err := tap.write(dir, t.Name()); err != nil {
			t.Logf("wire capture: %v", err)
		}
	}
	return tap
}
