//go:build e2e

package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/internal/peers"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

// vmInit is the VM's /init. It mounts cgroup2 alone (every controller in
// it), delegates memory and pids, and runs each step in a cgroup of its
// own that it shares with no one, as a systemd unit with Delegate=yes
// would. Each step ends with "STEP <name> <exit status>".
const vmInit = `#!/bin/sh
export PATH=/bin HOME=/tmp
mount -t proc proc /proc; mount -t sysfs sys /sys; mount -t devtmpfs dev /dev; mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "+memory +pids" > /sys/fs/cgroup/cgroup.subtree_control
echo "CONTROLLERS $(cat /sys/fs/cgroup/cgroup.controllers)"
run_in() { # run_in CGROUP CMD...: CMD alone in a new cgroup
  cg=/sys/fs/cgroup/$1; shift; mkdir $cg
  sh -c "echo \$\$ > $cg/cgroup.procs && exec \"\$@\"" sh "$@"
}

OUTPOST_CGROUP_REQUIRE_LIMITS=1 run_in unit-tests /cgroup.test -test.v -test.count=1 -test.timeout=5m
echo "STEP unit-tests $?"
echo "MOVED $(ls /sys/fs/cgroup/unit-tests | grep -c -- '-self$')"

ip link set lo up
run_in executor outpost executor serve --listen unix:///tmp/ex.sock --state-dir /tmp/ex --memory-max 64M --pids-max 32 --admin-listen 127.0.0.1:9100 >/tmp/serve.out 2>/tmp/serve.log &
for i in $(seq 300); do [ -S /tmp/ex.sock ] && break; sleep 0.1; done
cat /tmp/serve.log
T=unix:///tmp/ex.sock

outpost exec --target $T -- awk 'BEGIN { s = "x"; while (1) s = s s }'
echo "STEP memory-hog $?"

outpost exec --target $T --env OUTPOST_CGROUP_TEST_FORKS=100 -- /cgroup.test
echo "STEP fork-loop $?"

outpost exec --target $T --json -- sh -c 'for i in $(seq 100); do sleep 5 & done'
echo "STEP shell-fork-bomb $?"

outpost exec --target $T -- sh -c 'cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/memory.max /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/pids.max'
echo "STEP limits-in-place $?"

outpost exec --target $T --sandbox read-only -- sh -c 'echo "SANDBOXED-PIDS-MAX $(cat /sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)/pids.max)"'
echo "STEP sandboxed-limits $?"

wget -qO- http://127.0.0.1:9100/metrics | grep -E '^outpost_executor_(oom_kills_total|pids_limit_refusals_total|cgroups_lingering) '
echo "STEP metrics $?"

outpost executor doctor --memory-max 64M --pids-max 32 >/tmp/doctor.out; echo "STEP doctor $?"; cat /tmp/doctor.out
poweroff -f
`

// TestCgroupLimitsOnAKernelWithTheControllers boots Debian's kernel in QEMU
// (this machine binds memory and pids to cgroup v1, so their v2 limits
// cannot be tried here) and checks, on a real kernel: the cgroup package's
// tests with limits required; an executor given --memory-max 64M and
// --pids-max 32 has a memory hog OOM-killed (137) and a fork loop held to
// 32 processes; the limits are in its commands' cgroups, its metrics count
// the hits, and doctor agrees.
func TestCgroupLimitsOnAKernelWithTheControllers(t *testing.T) {
	root, err := peers.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	kernel := os.Getenv("OUTPOST_VM_KERNEL")
	if kernel == "" {
		kernel = filepath.Join(root, ".cache", "vm", "vmlinuz")
	}
	if _, err := os.Stat(kernel); err != nil {
		testdeps.Missing(t, "qemu", "no VM kernel at %s (scripts/vm-kernel.sh fetches one): %v", kernel, err)
	}
	qemu, err := exec.LookPath("qemu-system-x86_64")
	if err != nil {
		testdeps.Missing(t, "qemu", "qemu-system-x86_64 is not installed (scripts/vm-kernel.sh installs it)")
	}
	busybox, err := exec.LookPath("busybox")
	if err != nil {
		testdeps.Missing(t, "busybox", "busybox is not installed")
	}
	dir := t.TempDir()
	rootfs := filepath.Join(dir, "root")
	for _, d := range []string{"bin", "proc", "sys", "dev", "tmp"} {
		if err := os.MkdirAll(filepath.Join(rootfs, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	build := func(args ...string) {
		cmd := exec.Command("go", args...)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go %v: %v\n%s", args, err, out)
		}
	}
	build("test", "-c", "-o", filepath.Join(rootfs, "cgroup.test"), "./cgroup")
	build("build", "-o", filepath.Join(rootfs, "bin", "outpost"), "./cmd/outpost")
	bb, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(rootfs, "bin", "busybox"), bb, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields("sh mount mkdir echo cat sleep setsid seq awk wc cut ls grep true ip wget poweroff") {
		if err := os.Symlink("busybox", filepath.Join(rootfs, "bin", applet)); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(rootfs, "init"), []byte(vmInit), 0o755); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initrd.cpio")
	pack := exec.Command("sh", "-c", "find . | busybox cpio -o -H newc > "+initrd)
	pack.Dir = rootfs
	if out, err := pack.CombinedOutput(); err != nil {
		t.Fatalf("cpio: %v\n%s", err, out)
	}

	// Software emulation: KVM is not usable on every CI machine, and the
	// steps are light.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	vm := exec.CommandContext(ctx, qemu, "-accel", "tcg", "-m", "1024", "-smp", "2", "-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 quiet panic=-1 rdinit=/init", "-nographic", "-no-reboot")
	var out bytes.Buffer
	vm.Stdout, vm.Stderr = &out, &out
	start := time.Now()
	err = vm.Run()
	console := strings.ReplaceAll(out.String(), "\r", "")
	t.Logf("VM ran %v", time.Since(start).Round(time.Second))
	if err != nil {
		t.Fatalf("qemu: %v\n%s", err, console)
	}
	steps := map[string]int{}
	for _, m := range regexp.MustCompile(`(?m)^STEP (\S+) (\d+)$`).FindAllStringSubmatch(console, -1) {
		steps[m[1]], _ = strconv.Atoi(m[2])
		t.Log(m[0])
	}
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\nconsole:\n%s", fmt.Sprintf(format, args...), console)
	}
	if !strings.Contains(console, "CONTROLLERS") || !regexp.MustCompile(`CONTROLLERS .*memory.*pids`).MatchString(console) {
		fail("the VM's cgroup2 lacks memory or pids")
	}
	for _, s := range []struct {
		name string
		want int
	}{{"unit-tests", 0}, {"memory-hog", 137}, {"fork-loop", 0}, {"shell-fork-bomb", 2}, {"limits-in-place", 0}, {"sandboxed-limits", 0}, {"metrics", 0}, {"doctor", 0}} {
		got, ok := steps[s.name]
		if !ok {
			fail("step %s did not run", s.name)
		}
		if got != s.want {
			fail("step %s exited %d, want %d", s.name, got, s.want)
		}
	}
	if !strings.Contains(console, "MOVED 1") {
		fail("the unit tests' process did not move itself out of its shared cgroup to delegate the controllers")
	}
	if regexp.MustCompile(`--- SKIP`).MatchString(console) {
		fail("a cgroup test skipped in the VM")
	}
	m := regexp.MustCompile(`(?m)^FORKED (\d+) REFUSED (\d+)$`).FindStringSubmatch(console)
	if m == nil {
		fail("the fork tester printed no count")
	}
	t.Log(m[0])
	// The tester's own threads count against pids.max too.
	if forked, _ := strconv.Atoi(m[1]); forked >= 32 || forked < 8 || m[2] == "0" {
		fail("the fork tester started %s and was refused %s under --pids-max 32", m[1], m[2])
	}
	// The client is told which limit the command ran into.
	if !strings.Contains(console, "outpost exec: the command ran out of memory") {
		fail("outpost exec did not say the memory hog hit --memory-max")
	}
	if !regexp.MustCompile(`"limit":"pids"`).MatchString(console) || !strings.Contains(console, "reached the executor's --pids-max") {
		fail("outpost exec did not say the shell's forks were refused by --pids-max")
	}
	if !strings.Contains(console, "SANDBOXED-PIDS-MAX 32\n") {
		fail("a sandboxed command is not in a cgroup with the limits")
	}
	if !strings.Contains(console, "67108864\n32\n") {
		fail("a command's cgroup lacks memory.max 64M and pids.max 32")
	}
	for _, metric := range []string{"outpost_executor_oom_kills_total", "outpost_executor_pids_limit_refusals_total"} {
		m := regexp.MustCompile(`(?m)^` + metric + ` (\d+)`).FindStringSubmatch(console)
		if m == nil || m[1] == "0" {
			fail("%s did not count the limit's hits", metric)
		}
		t.Log(m[0])
	}
	if !strings.Contains(console, "enforceable: per-command memory limit") || !strings.Contains(console, "enforceable: per-command pids limit") {
		fail("doctor does not report the limits as enforceable")
	}
}
