package main

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// A stream as go test -json writes it for: a package with a passing test,
// a failing one with a skipped and a failing subtest, a test skipped by
// testdeps.Missing; a package without tests; one whose binary panicked
// mid-test; one that did not build.
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"    a_test.go:5: chatter of a passing test\n"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"--- PASS: TestOK (0.00s)\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestBad"}
{"Action":"output","Package":"m/a","Test":"TestBad","Output":"=== RUN   TestBad\n"}
{"Action":"run","Package":"m/a","Test":"TestBad/zsh"}
{"Action":"output","Package":"m/a","Test":"TestBad/zsh","Output":"=== RUN   TestBad/zsh\n"}
{"Action":"output","Package":"m/a","Test":"TestBad/zsh","Output":"    a_test.go:9: zsh is not installed [missing zsh; OUTPOST_REQUIRE=zsh makes this a failure]\n"}
{"Action":"output","Package":"m/a","Test":"TestBad/zsh","Output":"    --- SKIP: TestBad/zsh (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestBad/zsh","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestBad/sub"}
{"Action":"output","Package":"m/a","Test":"TestBad/sub","Output":"=== RUN   TestBad/sub\n"}
{"Action":"output","Package":"m/a","Test":"TestBad/sub","Output":"    a_test.go:12: the reason it failed\n"}
{"Action":"output","Package":"m/a","Test":"TestBad/sub","Output":"    --- FAIL: TestBad/sub (0.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestBad/sub","Elapsed":0}
{"Action":"output","Package":"m/a","Test":"TestBad","Output":"--- FAIL: TestBad (0.00s)\n"}
{"Action":"fail","Package":"m/a","Test":"TestBad","Elapsed":0}
{"Action":"run","Package":"m/a","Test":"TestEtcd"}
{"Action":"output","Package":"m/a","Test":"TestEtcd","Output":"=== RUN   TestEtcd\n"}
{"Action":"output","Package":"m/a","Test":"TestEtcd","Output":"    etcdtest.go:105: etcd not installed [missing etcd; OUTPOST_REQUIRE=etcd makes this a failure]\n"}
{"Action":"output","Package":"m/a","Test":"TestEtcd","Output":"--- SKIP: TestEtcd (0.00s)\n"}
{"Action":"skip","Package":"m/a","Test":"TestEtcd","Elapsed":0}
{"Action":"output","Package":"m/a","Output":"FAIL\n"}
{"Action":"output","Package":"m/a","Output":"FAIL\tm/a\t0.01s\n"}
{"Action":"fail","Package":"m/a","Elapsed":0.01}
{"Action":"start","Package":"m/none"}
{"Action":"output","Package":"m/none","Output":"?   \tm/none\t[no test files]\n"}
{"Action":"skip","Package":"m/none","Elapsed":0}
{"Action":"start","Package":"m/panics"}
{"Action":"run","Package":"m/panics","Test":"TestHangs"}
{"Action":"output","Package":"m/panics","Test":"TestHangs","Output":"=== RUN   TestHangs\n"}
{"Action":"output","Package":"m/panics","Test":"TestHangs","Output":"panic: test timed out after 1s\n"}
{"Action":"output","Package":"m/panics","Output":"FAIL\tm/panics\t1.00s\n"}
{"Action":"fail","Package":"m/panics","Elapsed":1}
{"ImportPath":"m/broken [m/broken.test]","Action":"build-output","Output":"broken/b_test.go:3:1: syntax error\n"}
{"ImportPath":"m/broken [m/broken.test]","Action":"build-fail"}
{"Action":"start","Package":"m/broken"}
{"Action":"output","Package":"m/broken","Output":"FAIL\tm/broken [build failed]\n"}
{"Action":"fail","Package":"m/broken","Elapsed":0,"FailedBuild":"m/broken [m/broken.test]"}
{"Action":"start","Package":"m/b"}
{"Action":"run","Package":"m/b","Test":"TestFine"}
{"Action":"output","Package":"m/b","Test":"TestFine","Output":"=== RUN   TestFine\n"}
{"Action":"output","Package":"m/b","Test":"TestFine","Output":"--- PASS: TestFine (0.00s)\n"}
{"Action":"pass","Package":"m/b","Test":"TestFine","Elapsed":0}
{"Action":"run","Package":"m/b","Test":"BenchmarkStart"}
{"Action":"output","Package":"m/b","Test":"BenchmarkStart","Output":"=== RUN   BenchmarkStart\n"}
{"Action":"output","Package":"m/b","Test":"BenchmarkStart","Output":"BenchmarkStart-2   \t       3\t   1368190 ns/op\n"}
{"Action":"pass","Package":"m/b","Test":"BenchmarkStart","Elapsed":0}
{"Action":"output","Package":"m/b","Output":"PASS\n"}
{"Action":"output","Package":"m/b","Output":"ok  \tm/b\t0.01s\n"}
{"Action":"pass","Package":"m/b","Elapsed":0.01}
`

func summarize(t *testing.T, verbose, skips bool) (printed, report string, s *summary) {
	t.Helper()
	var out, rep bytes.Buffer
	s = newSummary(&out, verbose, "m")
	if err := s.read(strings.NewReader(stream)); err != nil {
		t.Fatal(err)
	}
	s.report(&rep, skips)
	return out.String(), rep.String(), s
}

// row finds the table row of a package: ran, passed, failed, skipped.
func row(t *testing.T, report, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\s*(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+` + regexp.QuoteMeta(name) + `\b.*$`).FindStringSubmatch(report)
	if m == nil {
		t.Fatalf("no row for %s in\n%s", name, report)
	}
	return strings.Join(m[1:5], " ")
}

func TestQuietOutputIsGoTests(t *testing.T) {
	printed, _, s := summarize(t, false, false)
	for _, want := range []string{
		"    a_test.go:12: the reason it failed\n    --- FAIL: TestBad/sub (0.00s)\n--- FAIL: TestBad (0.00s)\n",
		"FAIL\tm/a\t0.01s\n",
		"?   \tm/none\t[no test files]\n",
		"panic: test timed out after 1s\n", // the unfinished test's output
		"broken/b_test.go:3:1: syntax error\n",
		"FAIL\tm/broken [build failed]\n",
		"BenchmarkStart-2   \t       3\t   1368190 ns/op\n", // as go test prints it without -v
		"ok  \tm/b\t0.01s\n",
	} {
		if !strings.Contains(printed, want) {
			t.Errorf("output lacks %q:\n%s", want, printed)
		}
	}
	for _, not := range []string{"chatter of a passing test", "=== RUN", "PASS\n", "--- PASS", "etcd not installed"} {
		if strings.Contains(printed, not) {
			t.Errorf("output has %q, which go test without -v does not print:\n%s", not, printed)
		}
	}
	if !s.failed() {
		t.Error("failed() is false")
	}
}

func TestVerboseOutputIsEveryLine(t *testing.T) {
	printed, _, _ := summarize(t, true, false)
	for _, want := range []string{"=== RUN   TestOK\n", "chatter of a passing test", "--- PASS: TestFine", "PASS\n", "etcd not installed"} {
		if !strings.Contains(printed, want) {
			t.Errorf("-v output lacks %q:\n%s", want, printed)
		}
	}
}

func TestReportCountsEachPackage(t *testing.T) {
	_, report, _ := summarize(t, false, false)
	for name, want := range map[string]string{
		"a":      "3 1 2 2", // TestOK passed, TestBad/sub and so TestBad failed; TestBad/zsh and TestEtcd skipped
		"panics": "1 0 1 0",
		"b":      "2 2 0 0",
		"broken": "0 0 0 0",
		"total":  "6 3 3 2",
	} {
		if got := row(t, report, name); got != want {
			t.Errorf("%s: %s, want %s\n%s", name, got, want, report)
		}
	}
	for _, want := range []string{"1 packages without tests", "build failed: broken", "skipped for a missing dependency: etcd (1), zsh (1)", "FAIL (build)"} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
	if strings.Contains(report, "skipped tests:") {
		t.Errorf("skips listed without -skips:\n%s", report)
	}
}

func TestReportListsSkipsWithTheirReasons(t *testing.T) {
	_, report, _ := summarize(t, false, true)
	for _, want := range []string{
		"skipped tests:\n",
		"  a TestBad/zsh: a_test.go:9: zsh is not installed [missing zsh;",
		"  a TestEtcd: etcdtest.go:105: etcd not installed [missing etcd;",
	} {
		if !strings.Contains(report, want) {
			t.Errorf("report lacks %q:\n%s", want, report)
		}
	}
}

// The real thing: testsummary runs go test on a module of its own, prints
// its failures, counts, and exits as go test did.
func TestRunsGoTestAndKeepsItsExitStatus(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs go test twice; skipped with -short")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("the go tool runs these tests but is not on PATH: %v", err)
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "testsummary")
	if out, err := exec.Command(goTool, "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	mod := filepath.Join(dir, "mod")
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(mod, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n\ngo 1.22\n")
	write("ok/ok_test.go", `package ok
import "testing"
func TestPasses(t *testing.T) {}
func TestSkips(t *testing.T) { t.Skip("no widget here [missing etcd; OUTPOST_REQUIRE=etcd makes this a failure]") }
`)
	run := func(env string, args ...string) (string, int) {
		t.Helper()
		cmd := exec.Command(bin, append([]string{"-go", goTool, "--", "-count=1"}, args...)...)
		cmd.Dir = mod
		cmd.Env = append(os.Environ(), "OUTPOST_REQUIRE="+env, "GOFLAGS=-mod=mod", "GOWORK=off")
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			t.Fatal(err)
		}
		return string(out), cmd.ProcessState.ExitCode()
	}
	out, code := run("", "./...")
	if code != 0 || !strings.Contains(out, "ok  \texample.com/m/ok") || row(t, out, "ok") != "1 1 0 1" {
		t.Fatalf("passing module: exit %d\n%s", code, out)
	}
	if strings.Contains(out, "skipped tests:") || !strings.Contains(out, "skipped for a missing dependency: etcd (1)") {
		t.Fatalf("without OUTPOST_REQUIRE: skips listed, or the missing class not counted:\n%s", out)
	}
	if out, _ := run("codex", "./..."); !strings.Contains(out, "  ok TestSkips: ok_test.go:4: no widget here") {
		t.Fatalf("with OUTPOST_REQUIRE the skip is not listed:\n%s", out)
	}
	if out, code := run("etdc", "./..."); code != 2 || !strings.Contains(out, `"etdc"`) {
		t.Fatalf("an unknown class: exit %d\n%s", code, out)
	}

	write("bad/bad_test.go", `package bad
import "testing"
func TestFails(t *testing.T) { t.Fatal("this is why") }
`)
	out, code = run("", "./...")
	if code != 1 || !strings.Contains(out, "this is why") || !strings.Contains(out, "--- FAIL: TestFails") || row(t, out, "bad") != "1 0 1 0" {
		t.Fatalf("failing module: exit %d\n%s", code, out)
	}
	write("broken/broken_test.go", "package broken\nfunc (\n")
	out, code = run("", "./broken")
	if code == 0 || !strings.Contains(out, "build failed") {
		t.Fatalf("a build failure: exit %d\n%s", code, out)
	}
}
