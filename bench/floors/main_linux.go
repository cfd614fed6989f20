// Command floors measures what the parts of a sandboxed start cost on this
// machine, to show where the sandbox's ≤ 1 ms target stands (README,
// Benchmarks): fork+exec+exit of /bin/true, of an empty Go program and of
// an empty static C program; /bin/true in user, mount and PID namespaces;
// and a stand-in helper written in C (csrc/helper.c) doing outpost's
// sandbox set-up, with and without the PID namespace and its init layer,
// and as root without a user namespace. Each row is the median of -runs
// starts, and its overhead over plain /bin/true. The C rows need a C
// compiler (cc); they are skipped without one.
//
//	go run ./bench/floors [-runs 300]
package main

import (
	_ "embed"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"syscall"
	"time"
)

//go:embed csrc/helper.c
var helperC []byte

var runs = flag.Int("runs", 300, "starts per row")

func main() {
	flag.Parse()
	dir, err := os.MkdirTemp("", "outpost-floors-")
	if err != nil {
		fail(err)
	}
	defer os.RemoveAll(dir)

	emptyGo := filepath.Join(dir, "empty-go")
	src := filepath.Join(dir, "main.go")
	os.WriteFile(src, []byte("package main\n\nfunc main() {}\n"), 0o644)
	build := exec.Command("go", "build", "-o", emptyGo, src)
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GO111MODULE=off")
	if out, err := build.CombinedOutput(); err != nil {
		fail(fmt.Errorf("building the empty Go program: %v\n%s", err, out))
	}
	var emptyC, helper string
	if cc, err := exec.LookPath("cc"); err == nil {
		os.WriteFile(filepath.Join(dir, "empty.c"), []byte("int main(void) { return 0; }\n"), 0o644)
		os.WriteFile(filepath.Join(dir, "helper.c"), helperC, 0o644)
		emptyC, helper = filepath.Join(dir, "empty-c"), filepath.Join(dir, "helper")
		for _, b := range [][]string{{"-o", emptyC, filepath.Join(dir, "empty.c")}, {"-o", helper, filepath.Join(dir, "helper.c")}} {
			if out, err := exec.Command(cc, append([]string{"-O2", "-static"}, b...)...).CombinedOutput(); err != nil {
				fmt.Fprintf(os.Stderr, "floors: cc: %v\n%s", err, out)
				emptyC, helper = "", ""
				break
			}
		}
	} else {
		fmt.Fprintln(os.Stderr, "floors: no C compiler (cc): the C rows are skipped")
	}

	uid, gid := os.Getuid(), os.Getgid()
	ns := func(flags uintptr) *syscall.SysProcAttr {
		a := &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
		if flags&syscall.CLONE_NEWUSER != 0 {
			a.UidMappings = []syscall.SysProcIDMap{{ContainerID: uid, HostID: uid, Size: 1}}
			a.GidMappings = []syscall.SysProcIDMap{{ContainerID: gid, HostID: gid, Size: 1}}
		}
		return a
	}
	const userMntPid = syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS | syscall.CLONE_NEWPID
	type row struct {
		name string
		attr *syscall.SysProcAttr
		env  []string
		argv []string
		skip bool
	}
	rows := []row{
		{"/bin/true", ns(0), nil, []string{"/bin/true"}, false},
		{"empty Go program (static)", ns(0), nil, []string{emptyGo}, false},
		{"empty C program (static)", ns(0), nil, []string{emptyC}, emptyC == ""},
		{"/bin/true in user+mount+PID namespaces", ns(userMntPid), nil, []string{"/bin/true"}, false},
		{"C helper + /bin/true: user+mount+PID namespaces, init layer", ns(userMntPid), nil, []string{helper, "/bin/true"}, helper == ""},
		{"C helper + /bin/true: user+mount namespaces, exec'd directly", ns(syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS), []string{"FLOOR_EXEC=1"}, []string{helper, "/bin/true"}, helper == ""},
		{"C helper + /bin/true as root: mount+PID namespaces, init layer", ns(syscall.CLONE_NEWNS | syscall.CLONE_NEWPID), nil, []string{helper, "/bin/true"}, helper == "" || uid != 0},
		{"C helper + /bin/true as root: mount namespace, exec'd directly", ns(syscall.CLONE_NEWNS), []string{"FLOOR_EXEC=1"}, []string{helper, "/bin/true"}, helper == "" || uid != 0},
	}
	fmt.Printf("| start of | p50 ms | over /bin/true |\n|---|---|---|\n")
	var base time.Duration
	for i, r := range rows {
		if r.skip {
			continue
		}
		d, err := median(r.attr, r.env, r.argv)
		if err != nil {
			fmt.Printf("| %s | failed: %v | |\n", r.name, err)
			continue
		}
		if i == 0 {
			base = d
		}
		fmt.Printf("| %s | %.2f | %+.2f |\n", r.name, ms(d), ms(d-base))
	}
}

// median starts argv runs times and returns the median wall time of a
// start to its exit.
func median(attr *syscall.SysProcAttr, env, argv []string) (time.Duration, error) {
	ds := make([]time.Duration, 0, *runs)
	for range *runs {
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.SysProcAttr, cmd.Env = attr, env
		t := time.Now()
		if err := cmd.Run(); err != nil { // output to /dev/null: no copying goroutines
			return 0, err
		}
		ds = append(ds, time.Since(t))
	}
	slices.Sort(ds)
	return ds[len(ds)/2], nil
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func fail(err error) {
	fmt.Fprintln(os.Stderr, "floors:", err)
	os.Exit(1)
}
