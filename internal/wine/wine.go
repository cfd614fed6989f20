// Package wine runs this module's Windows binaries under Wine, for tests
// on a Linux machine: outpost.exe as a Windows user would run it, and the
// windows/amd64 test binaries of platform code (ACLs, consoles, paths).
//
// The wineserver a wine process starts inherits that process's stderr
// and may write its object dumps there later: tests look for what they
// expect in a Windows program's stderr rather than compare all of it.
//
// One Wine prefix (a Windows installation, about 700 MB) serves a whole
// test process: Shared makes it on first use, Cleanup (from TestMain)
// stops its wineserver and removes it. Tests keep their own state apart
// with XDG_CONFIG_HOME and XDG_STATE_HOME, which Wine passes through and
// outpost honours on Windows as everywhere, or by removing what they
// left in the prefix's profile.
//
// Wine before 9.0 (Debian 12 has 8.0) lacks bcryptprimitives.dll, whose
// ProcessPrng the Go runtime (1.22 and later) calls at start-up for its
// random numbers; a Go binary dies there ("bcryptprimitives.dll not
// found"). Where the prefix has none, Shared installs a stand-in built
// with the MinGW-w64 binutils: a DLL whose one export forwards ProcessPrng
// to advapi32's SystemFunction036 (RtlGenRandom), which takes the same
// arguments (a buffer and its length, which the x64 convention passes in
// the same registers) and returns success in the same low byte.
package wine

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"

	"github.com/outpost-exec/outpost/internal/testdeps"
)

// Prefix is a Wine prefix ready to run Go's windows/amd64 binaries.
type Prefix struct {
	// Dir is the prefix (WINEPREFIX); its C: drive is Dir/drive_c.
	Dir string
	own []string // WINEPREFIX and the like
	env []string // own, after os.Environ()
}

var (
	sharedOnce sync.Once
	shared     *Prefix
	sharedErr  error
)

// Shared returns the process's prefix, making it on first use (wineboot,
// several seconds). A missing wine or MinGW-w64 ld goes through
// testdeps.Missing (class "wine"); another failure fails the test.
func Shared(t testing.TB) *Prefix {
	t.Helper()
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		t.Skipf("wine: the tests run Windows binaries under Wine on linux/amd64, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	if err := Available(); err != nil {
		testdeps.Missing(t, "wine", "wine: %v", err)
	}
	sharedOnce.Do(func() { shared, sharedErr = newPrefix() })
	if sharedErr != nil {
		t.Fatalf("wine: %v", sharedErr)
	}
	return shared
}

// Available reports why Windows binaries cannot run here (nil if they
// can): Wine's programs and the MinGW-w64 binutils must be on $PATH.
func Available() error {
	if runtime.GOOS != "linux" || runtime.GOARCH != "amd64" {
		return fmt.Errorf("Windows binaries run under Wine on linux/amd64 only, not %s/%s", runtime.GOOS, runtime.GOARCH)
	}
	for _, tool := range []string{"wine", "wineserver", "wineboot", mingwAS, mingwLD} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed", tool)
		}
	}
	return nil
}

// Env is what a process needs in its environment to run in the prefix
// (through "wine EXE ..."), beside what it inherits.
func (p *Prefix) Env() []string { return append([]string(nil), p.own...) }

// Cleanup stops the shared prefix's wineserver and removes the prefix, if
// Shared made one; TestMain calls it after m.Run.
func Cleanup() {
	if shared == nil {
		return
	}
	kill := exec.Command("wineserver", "-k")
	kill.Env = shared.env
	_ = kill.Run()
	_ = os.RemoveAll(shared.Dir)
}

const (
	mingwLD = "x86_64-w64-mingw32-ld"
	mingwAS = "x86_64-w64-mingw32-as"
)

func newPrefix() (*Prefix, error) {
	dir, err := os.MkdirTemp("", "outpost-wine-")
	if err != nil {
		return nil, err
	}
	// No Mono or Gecko installers: outpost needs neither, and they would
	// try the network.
	own := []string{"WINEPREFIX=" + dir, "WINEDEBUG=-all", "WINEDLLOVERRIDES=mscoree,mshtml="}
	p := &Prefix{Dir: dir, own: own, env: append(os.Environ(), own...)}
	boot := exec.Command("wineboot", "--init")
	boot.Env = p.env
	if out, err := boot.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("wineboot --init: %v: %s", err, out)
	}
	sys32 := filepath.Join(dir, "drive_c", "windows", "system32")
	if _, err := os.Stat(filepath.Join(sys32, "bcryptprimitives.dll")); errors.Is(err, os.ErrNotExist) {
		if err := buildProcessPrngShim(filepath.Join(sys32, "bcryptprimitives.dll")); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	return p, nil
}

// buildProcessPrngShim writes the stand-in bcryptprimitives.dll to dst:
// no code, one forwarded export (see the package comment).
func buildProcessPrngShim(dst string) error {
	tmp, err := os.MkdirTemp("", "outpost-wine-shim-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	def := "LIBRARY bcryptprimitives.dll\nEXPORTS\nProcessPrng = advapi32.SystemFunction036\n"
	if err := os.WriteFile(filepath.Join(tmp, "bcryptprimitives.def"), []byte(def), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(tmp, "empty.s"), nil, 0o644); err != nil {
		return err
	}
	for _, args := range [][]string{
		{mingwAS, "-o", "empty.o", "empty.s"},
		{mingwLD, "--dll", "-nostdlib", "--entry", "0", "-o", dst, "empty.o", "bcryptprimitives.def"},
	} {
		cmd := exec.Command(args[0], args[1:]...)
		cmd.Dir = tmp
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("build the ProcessPrng shim: %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

// Command is wine running exe (a Linux path) with args, in the prefix;
// the caller may add to its Env (which starts as the prefix's).
func (p *Prefix) Command(exe string, args ...string) *exec.Cmd {
	cmd := exec.Command("wine", append([]string{exe}, args...)...)
	cmd.Env = append([]string(nil), p.env...)
	return cmd
}

// Path is the Windows name of a Linux path, through Wine's Z: drive,
// which maps the whole Unix file system.
func Path(linux string) string {
	abs, err := filepath.Abs(linux)
	if err != nil {
		abs = linux
	}
	return `Z:` + strings.ReplaceAll(abs, "/", `\`)
}

// Build compiles pkg (an import path or a directory) for windows/amd64
// into dir and returns the .exe's path.
func Build(t testing.TB, dir, pkg string, flags ...string) string {
	t.Helper()
	exe := filepath.Join(dir, filepath.Base(pkg)+".exe")
	args := append(append([]string{"build", "-o", exe}, flags...), pkg)
	goCmd(t, args...)
	return exe
}

// BuildTest compiles the test binary of pkg for windows/amd64 into dir
// and returns the .exe's path.
func BuildTest(t testing.TB, dir, pkg string) string {
	t.Helper()
	exe := filepath.Join(dir, filepath.Base(pkg)+".test.exe")
	goCmd(t, "test", "-c", "-o", exe, pkg)
	return exe
}

func goCmd(t testing.TB, args ...string) {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		testdeps.Missing(t, "go", "wine: the go tool is not on $PATH")
	}
	cmd := exec.Command("go", args...)
	cmd.Env = append(os.Environ(), "GOOS=windows", "GOARCH=amd64", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go %s (windows/amd64): %v\n%s", strings.Join(args, " "), err, out)
	}
}
