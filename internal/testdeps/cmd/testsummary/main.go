// Command testsummary runs `go test -json` with the arguments after "--",
// prints what `go test` would have printed, and ends with a table of what
// ran in each package: tests run to a verdict, passed, failed and skipped.
//
// The table is the point: a green `go test ./...` does not say whether the
// etcd, codex or sandbox tests ran or skipped because something was
// missing. With OUTPOST_REQUIRE set (internal/testdeps) — or -skips — every
// skipped test is listed with its reason, and the dependency classes whose
// absence skipped tests are counted on one line.
//
// Output is go test's own: without -v the "ok"/"FAIL" line of each package,
// and each failed test's output in full (CI logs are read by people); with
// -v every line, as go test -v. Build errors arrive on stderr or as
// build-output events and are printed as they come.
//
// The exit status is go test's (a failed test or build fails make); 1 if
// go test exited 0 yet a test failed; 2 if OUTPOST_REQUIRE names an
// unknown class or go test could not be started.
//
// Usage:
//
//	go run ./internal/testdeps/cmd/testsummary [-go go] [-v] [-skips] -- -race -count=1 ./...
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

func main() {
	goTool := flag.String("go", "go", "the go command")
	verbose := flag.Bool("v", false, "print every line of output, as go test -v")
	skips := flag.Bool("skips", os.Getenv(testdeps.Env) != "", "list skipped tests with their reasons (default: when "+testdeps.Env+" is set)")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: testsummary [-go go] [-v] [-skips] -- go-test-arguments...\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if _, err := testdeps.Parse(os.Getenv(testdeps.Env)); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	args := append([]string{"test", "-json"}, flag.Args()...)
	cmd := exec.Command(*goTool, args...)
	cmd.Stdin = os.Stdin
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "testsummary:", err)
		os.Exit(2)
	}
	out := bufio.NewWriter(os.Stdout)
	s := newSummary(out, *verbose, modulePath("go.mod"))
	readErr := s.read(stdout)
	waitErr := cmd.Wait()
	s.report(out, *skips)
	out.Flush()
	code := 0
	var exit *exec.ExitError
	switch {
	case errors.As(waitErr, &exit):
		code = exit.ExitCode()
		if code <= 0 {
			code = 1 // killed by a signal
		}
	case waitErr != nil:
		fmt.Fprintln(os.Stderr, "testsummary:", waitErr)
		code = 2
	case readErr != nil:
		fmt.Fprintln(os.Stderr, "testsummary: reading go test's output:", readErr)
		code = 2
	case s.failed():
		code = 1
	}
	os.Exit(code)
}

// modulePath is the module line of go.mod, stripped from package names in
// the table; "" if there is none.
func modulePath(gomod string) string {
	b, err := os.ReadFile(gomod)
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(string(b), "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(l), "module "); ok {
			return strings.Trim(strings.TrimSpace(m), `"`)
		}
	}
	return ""
}

// event is one line of go test -json (cmd/test2json's TestEvent, and the
// build events of go build -json).
type event struct {
	Action      string
	Package     string
	Test        string
	Output      string
	Elapsed     float64
	ImportPath  string // build-output
	FailedBuild string
}

// test is one test or subtest of a package.
type test struct {
	name   string
	output []string // its output, kept until its verdict (a skip's for good)
	result string   // "pass", "fail", "skip"; "" while it runs
}

// pkg is what one package's test binary did.
type pkg struct {
	name        string
	tests       map[string]*test
	order       []string // test names in the order they started
	result      string   // "pass", "fail", "skip" (no test files), "" while running
	failedBuild bool
}

// summary follows the event stream, printing as go test would, and counts.
type summary struct {
	w       io.Writer
	verbose bool
	module  string
	pkgs    map[string]*pkg
	order   []string
}

func newSummary(w io.Writer, verbose bool, module string) *summary {
	return &summary{w: w, verbose: verbose, module: module, pkgs: map[string]*pkg{}}
}

// read consumes go test -json output until EOF. A line that is not JSON
// (go test prints nothing else on stdout, but a test binary's direct writes
// to its stdout might not be converted) is printed as it is.
func (s *summary) read(r io.Reader) error {
	br := bufio.NewReader(r)
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			var e event
			if json.Unmarshal(line, &e) != nil || e.Action == "" {
				s.w.Write(line)
			} else {
				s.event(e)
			}
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

func (s *summary) pkg(name string) *pkg {
	p := s.pkgs[name]
	if p == nil {
		p = &pkg{name: name, tests: map[string]*test{}}
		s.pkgs[name] = p
		s.order = append(s.order, name)
	}
	return p
}

// framing lines go test -v prints around a test's own output; without -v
// go test does not print them, and they are no skip reason.
func framing(line string) bool {
	for _, p := range []string{"=== RUN", "=== PAUSE", "=== CONT", "=== NAME"} {
		if strings.HasPrefix(line, p) {
			return true
		}
	}
	return false
}

func (s *summary) event(e event) {
	switch e.Action {
	case "build-output":
		io.WriteString(s.w, e.Output)
		return
	case "build-fail":
		return
	}
	if e.Package == "" {
		io.WriteString(s.w, e.Output)
		return
	}
	p := s.pkg(e.Package)
	if e.Test == "" {
		s.packageEvent(p, e)
		return
	}
	t := p.tests[e.Test]
	if t == nil {
		t = &test{name: e.Test}
		p.tests[e.Test] = t
		p.order = append(p.order, e.Test)
	}
	switch e.Action {
	case "output":
		// Kept until the verdict even with -v: a skip's is its reason.
		t.output = append(t.output, e.Output)
		// go test prints a benchmark's results without -v too.
		if s.verbose || strings.HasPrefix(e.Test, "Benchmark") && !framing(e.Output) {
			io.WriteString(s.w, e.Output)
		}
	case "pass", "skip":
		t.result = e.Action
		if e.Action == "pass" {
			t.output = nil
		}
	case "fail":
		t.result = "fail"
		if !s.verbose {
			s.printTest(t)
			t.output = nil
		}
	}
}

func (s *summary) packageEvent(p *pkg, e event) {
	switch e.Action {
	case "output":
		if s.verbose || e.Output != "PASS\n" {
			io.WriteString(s.w, e.Output)
		}
	case "pass", "skip":
		p.result = e.Action
	case "fail":
		p.result = "fail"
		p.failedBuild = e.FailedBuild != ""
		// A test still running when its binary failed (a panic, a
		// timeout) has no verdict of its own: its output says why.
		for _, name := range p.order {
			if t := p.tests[name]; t.result == "" {
				t.result = "fail"
				if !s.verbose {
					s.printTest(t)
					t.output = nil
				}
			}
		}
	}
}

func (s *summary) printTest(t *test) {
	for _, l := range t.output {
		if !framing(l) {
			io.WriteString(s.w, l)
		}
	}
}

// skipReason is what a skipped test printed, without go test's framing and
// its "--- SKIP" line: normally the file:line and the message of t.Skip.
func skipReason(t *test) string {
	var parts []string
	for _, l := range strings.Split(strings.Join(t.output, ""), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || framing(l) || strings.HasPrefix(l, "--- SKIP") {
			continue
		}
		parts = append(parts, l)
	}
	return strings.Join(parts, " / ")
}

// failed reports whether any package or test failed.
func (s *summary) failed() bool {
	for _, p := range s.pkgs {
		if p.result == "fail" {
			return true
		}
	}
	return false
}

// counts of one package.
type counts struct{ ran, pass, fail, skip int }

func (p *pkg) counts() counts {
	var c counts
	for _, t := range p.tests {
		switch t.result {
		case "pass":
			c.pass++
		case "fail":
			c.fail++
		case "skip":
			c.skip++
		}
	}
	c.ran = c.pass + c.fail
	return c
}

// missingClass finds the class in a skip reason written by
// testdeps.Missing ("… [missing etcd; …]").
var missingClass = regexp.MustCompile(`\[missing ([a-z0-9-]+)[;,\]]`)

func (s *summary) short(name string) string {
	if s.module != "" {
		if name == s.module {
			return "."
		}
		if rest, ok := strings.CutPrefix(name, s.module+"/"); ok {
			return rest
		}
	}
	return name
}

// report prints the table (and, with skips, every skipped test and why).
func (s *summary) report(w io.Writer, skips bool) {
	names := append([]string(nil), s.order...)
	sort.Strings(names)
	fmt.Fprintf(w, "\n=== test summary (%s=%q; ran = passed + failed, of tests, subtests and benchmarks)\n", testdeps.Env, os.Getenv(testdeps.Env))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "ran\tpassed\tfailed\tskipped\t\tpackage")
	var total counts
	var noTests, buildFailed []string
	for _, n := range names {
		p := s.pkgs[n]
		c := p.counts()
		if p.failedBuild {
			buildFailed = append(buildFailed, s.short(n))
		}
		if len(p.tests) == 0 && p.result == "skip" {
			noTests = append(noTests, s.short(n))
			continue
		}
		status := ""
		switch p.result {
		case "fail":
			status = "FAIL"
			if p.failedBuild {
				status = "FAIL (build)"
			}
		case "":
			status = "(no result)"
		}
		fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\t%s %s\n", c.ran, c.pass, c.fail, c.skip, s.short(n), status)
		total.ran += c.ran
		total.pass += c.pass
		total.fail += c.fail
		total.skip += c.skip
	}
	fmt.Fprintf(tw, "%d\t%d\t%d\t%d\t\t%s\n", total.ran, total.pass, total.fail, total.skip, "total")
	tw.Flush()
	if len(noTests) > 0 {
		fmt.Fprintf(w, "%d packages without tests\n", len(noTests))
	}
	if len(buildFailed) > 0 {
		fmt.Fprintf(w, "build failed: %s\n", strings.Join(buildFailed, " "))
	}
	missing := map[string]int{}
	var listed []string
	for _, n := range names {
		p := s.pkgs[n]
		for _, tn := range p.order {
			t := p.tests[tn]
			if t.result != "skip" {
				continue
			}
			reason := skipReason(t)
			if m := missingClass.FindStringSubmatch(reason); m != nil {
				missing[m[1]]++
			}
			if skips {
				listed = append(listed, fmt.Sprintf("  %s %s: %s", s.short(n), tn, reason))
			}
		}
	}
	if len(missing) > 0 {
		var parts []string
		for _, c := range testdeps.Names() {
			if missing[c] > 0 {
				parts = append(parts, fmt.Sprintf("%s (%d)", c, missing[c]))
			}
		}
		fmt.Fprintf(w, "skipped for a missing dependency: %s\n", strings.Join(parts, ", "))
	}
	if skips && len(listed) > 0 {
		fmt.Fprintln(w, "skipped tests:")
		for _, l := range listed {
			fmt.Fprintln(w, l)
		}
	}
}
