//go:build linux

package cgroup

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/internal/proctest"
	"github.com/outpost-exec/outpost/internal/testdeps"
)

const testTimeout = 10 * time.Second

func open(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := Open(cfg)
	if errors.Is(err, ErrUnavailable) {
		testdeps.Missing(t, "cgroup", "no per-command cgroups on this machine: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m
}

// start runs script with sh inside a new cgroup of m and waits for the
// shell to exit; it returns the cgroup and the shell's stdout.
func start(t *testing.T, m *Manager, script string) (*Cgroup, string) {
	t.Helper()
	cg, err := m.New()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: cg.FD()}
	out, err := cmd.Output()
	cg.Started()
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return cg, strings.TrimSpace(string(out))
}

// watch follows pid by pidfd (pids are recycled) and kills it when the
// test ends.
func watch(t *testing.T, pid int) *proctest.Proc { t.Helper(); return proctest.Watch(t, pid) }

func waitGone(t *testing.T, p *proctest.Proc) {
	t.Helper()
	if !p.WaitGone(testTimeout) {
		t.Fatalf("process %d still runs", p.Pid)
	}
}

func TestCommandIsBornInItsOwnCgroup(t *testing.T) {
	m := open(t, Config{})
	cg, out := start(t, m, "cat /proc/self/cgroup")
	defer cg.Release()
	mount, _, err := ownCgroup()
	if err != nil {
		t.Fatal(err)
	}
	want := "0::/" + strings.TrimPrefix(strings.TrimPrefix(cg.Dir(), mount), "/")
	if !strings.Contains(out+"\n", want+"\n") {
		t.Fatalf("the child's cgroup:\n%s\nwant %s", out, want)
	}
}

// A descendant that calls setsid leaves the process group, so a group
// kill misses it; the cgroup kill must not.
func TestSetsidDescendantCannotEscapeTheKill(t *testing.T) {
	m := open(t, Config{})
	cg, out := start(t, m, "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
	pid, err := strconv.Atoi(out)
	if err != nil {
		t.Fatalf("pid %q", out)
	}
	sleeper := watch(t, pid)
	// A background job is not a group leader, so setsid(1) calls setsid
	// itself: the sleeper leaves our process group and session.
	waitFor(t, func() bool { sid, _ := unix.Getsid(pid); return sid == pid })
	if !cg.Populated() {
		t.Fatal("the cgroup is empty while the escaped sleeper runs")
	}
	cg.Kill()
	waitGone(t, sleeper)
	waitFor(t, func() bool { return !cg.Populated() })
	cg.Release()
	if _, err := os.Stat(cg.Dir()); !os.IsNotExist(err) {
		t.Fatalf("the cgroup was not removed: %v", err)
	}
}

func TestSignalReachesEveryMember(t *testing.T) {
	m := open(t, Config{})
	cg, _ := start(t, m, "for i in 1 2 3; do setsid sleep 300 </dev/null >/dev/null 2>&1 & done")
	waitFor(t, func() bool { return len(cg.Procs()) == 3 })
	var procs []*proctest.Proc
	for _, pid := range cg.Procs() {
		procs = append(procs, watch(t, pid))
	}
	cg.Signal(syscall.SIGTERM)
	for _, p := range procs {
		waitGone(t, p)
	}
	waitFor(t, func() bool { return !cg.Populated() })
	cg.Release()
}

func TestFinishedCommandsBackgroundProcessesKeepItsCgroupUntilTheyEnd(t *testing.T) {
	m := open(t, Config{SweepEvery: 10 * time.Millisecond})
	quick, _ := start(t, m, "true")
	quick.Release()
	if _, err := os.Stat(quick.Dir()); !os.IsNotExist(err) {
		t.Fatalf("an empty cgroup was kept: %v", err)
	}
	cg, out := start(t, m, "sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
	pid, _ := strconv.Atoi(out)
	background := watch(t, pid)
	cg.Release()
	if m.Lingering() != 1 {
		t.Fatalf("lingering %d, want 1", m.Lingering())
	}
	background.Kill() // it ends on its own terms
	waitGone(t, background)
	// The sweeper removes it; no other command needs to start.
	waitFor(t, func() bool { return m.Lingering() == 0 })
	if _, err := os.Stat(cg.Dir()); !os.IsNotExist(err) {
		t.Fatalf("the emptied cgroup was not removed: %v", err)
	}
}

func TestLingeringBoundKillsTheOldest(t *testing.T) {
	m := open(t, Config{MaxLingering: 2})
	var procs []*proctest.Proc
	for range 3 {
		cg, out := start(t, m, "sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
		pid, _ := strconv.Atoi(out)
		procs = append(procs, watch(t, pid))
		cg.Release()
	}
	if n := m.Lingering(); n != 2 {
		t.Fatalf("lingering %d, want 2", n)
	}
	waitGone(t, procs[0])
	if procs[1].Gone() || procs[2].Gone() {
		t.Fatal("a newer lingering process was killed")
	}
}

func TestCloseKillsEverythingAndRemovesItsCgroups(t *testing.T) {
	m := open(t, Config{})
	running, err := m.New()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: running.FD()}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	running.Started()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	left, out := start(t, m, "setsid sleep 300 </dev/null >/dev/null 2>&1 & echo $!")
	pid, _ := strconv.Atoi(out)
	leftover := watch(t, pid)
	left.Release()
	m.Close()
	select {
	case <-done:
	case <-time.After(testTimeout):
		t.Fatal("a running command survived Close")
	}
	waitGone(t, leftover)
	if _, err := os.Stat(m.dir); !os.IsNotExist(err) {
		t.Fatalf("%s was not removed: %v", m.dir, err)
	}
	if _, err := m.New(); err == nil {
		t.Fatal("New after Close succeeded")
	}
}

func TestCgroupsOfADeadExecutorAreSweptByTheNext(t *testing.T) {
	mount, rel, err := ownCgroup()
	if err != nil {
		testdeps.Missing(t, "cgroup", "no cgroup v2: %v", err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(mount, rel, fmt.Sprintf("outpost-%d", dead.Process.Pid))
	if err := os.MkdirAll(filepath.Join(stale, "cmd-1"), 0o755); err != nil {
		testdeps.Missing(t, "cgroup", "cgroup v2 is not writable here: %v", err)
	}
	fd, err := unix.Open(filepath.Join(stale, "cmd-1"), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	orphan := exec.Command("sleep", "300")
	orphan.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd}
	if err := orphan.Start(); err != nil {
		t.Fatal(err)
	}
	unix.Close(fd)
	done := make(chan error, 1)
	go func() { done <- orphan.Wait() }()
	m := open(t, Config{})
	if m.Status().Swept < 1 {
		t.Fatalf("swept %d, want ≥ 1", m.Status().Swept)
	}
	select {
	case <-done:
	case <-time.After(testTimeout):
		orphan.Process.Kill()
		t.Fatal("the dead executor's command survived the sweep")
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Fatalf("%s was not removed: %v", stale, err)
	}
}

// A limit the machine cannot enforce is reported with the reason, never
// silently dropped.
func TestLimitsAreEnforcedOrReportedWithTheReason(t *testing.T) {
	probe := open(t, Config{})
	available := strings.Fields(readFile(filepath.Join(probe.base, "cgroup.controllers")))
	probe.Close()
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"memory", Config{MemoryMax: 256 << 20}},
		{"pids", Config{PidsMax: 64}},
	} {
		m := open(t, c.cfg)
		st := m.Status()
		m.Close()
		enforced := st.MemoryMax == c.cfg.MemoryMax && st.PidsMax == c.cfg.PidsMax
		if slices.Contains(available, c.name) {
			if !enforced && !strings.Contains(st.NoLimits, "shared with other processes") {
				t.Fatalf("%s is available but not enforced: %+v", c.name, st)
			}
			continue
		}
		if enforced || len(st.Controllers) != 0 {
			t.Fatalf("%s: reported enforced without the controller: %+v", c.name, st)
		}
		if !strings.Contains(st.NoLimits, "the "+c.name+" controller is not available") {
			t.Fatalf("%s: unclear reason: %q", c.name, st.NoLimits)
		}
	}
}

func TestPidsMaxStopsAForkBomb(t *testing.T) {
	m := open(t, Config{PidsMax: 16})
	if m.Status().PidsMax == 0 {
		skipOrFail(t, "pids limits are not enforced here: %s", m.Status().NoLimits)
	}
	cg, err := m.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Release()
	cmd := exec.Command(os.Args[0], "-test.run=^TestMain$")
	cmd.Env = append(os.Environ(), "OUTPOST_CGROUP_TEST_FORKS=40")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	out, err := cmd.Output()
	cg.Started()
	if err != nil {
		t.Fatalf("fork tester: %v (%s)", err, out)
	}
	var forked, refused int
	if _, err := fmt.Sscanf(string(out), "FORKED %d REFUSED %d", &forked, &refused); err != nil {
		t.Fatalf("fork tester said %q", out)
	}
	// Its own threads count against pids.max too.
	if refused == 0 || forked >= 16 {
		t.Fatalf("forked %d, refused %d under pids.max 16", forked, refused)
	}
	if cg.PidsMaxHits() == 0 {
		t.Fatal("pids.events counted no refused fork")
	}
}

func TestMemoryMaxKillsTheWholeCommand(t *testing.T) {
	m := open(t, Config{MemoryMax: 32 << 20})
	if m.Status().MemoryMax == 0 {
		skipOrFail(t, "memory limits are not enforced here: %s", m.Status().NoLimits)
	}
	cg, err := m.New()
	if err != nil {
		t.Fatal(err)
	}
	defer cg.Release()
	// A sibling that sleeps, and a hog: with memory.oom.group both go.
	cmd := exec.Command("/bin/sh", "-c", "sleep 300 & exec "+os.Args[0]+" -test.run=^TestMain$")
	cmd.Env = append(os.Environ(), "OUTPOST_CGROUP_TEST_HOG=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: cg.FD()}
	err = cmd.Run()
	cg.Started()
	if err == nil {
		t.Fatal("the hog finished under memory.max")
	}
	waitFor(t, func() bool { return !cg.Populated() })
	if cg.OOMKills() == 0 {
		t.Fatalf("memory.events counted no OOM kill (exit: %v)", err)
	}
}

func TestMain(m *testing.M) {
	// A fork tester, for pids.max (also run by the e2e VM test): starts
	// up to N sleepers, says how many forks the kernel refused.
	if n, _ := strconv.Atoi(os.Getenv("OUTPOST_CGROUP_TEST_FORKS")); n > 0 {
		var kids []*exec.Cmd
		refused := 0
		for range n {
			c := exec.Command("sleep", "30")
			if c.Start() != nil {
				refused++
				continue
			}
			kids = append(kids, c)
		}
		fmt.Printf("FORKED %d REFUSED %d\n", len(kids), refused)
		for _, c := range kids {
			c.Process.Kill()
			c.Wait()
		}
		os.Exit(0)
	}
	if os.Getenv("OUTPOST_CGROUP_TEST_HOG") == "1" {
		var hog [][]byte
		for range 1024 { // 1 GiB, touched
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = 1
			}
			hog = append(hog, b)
		}
		os.Exit(len(hog) & 0)
	}
	os.Exit(m.Run())
}

// skipOrFail skips a test of limits this machine cannot enforce, unless
// OUTPOST_CGROUP_REQUIRE_LIMITS=1 (the e2e VM, whose kernel has the
// controllers in cgroup v2) or OUTPOST_REQUIRE=cgroup-limits says they
// must be.
func skipOrFail(t *testing.T, format string, args ...any) {
	t.Helper()
	if os.Getenv("OUTPOST_CGROUP_REQUIRE_LIMITS") == "1" {
		t.Fatalf(format, args...)
	}
	testdeps.Missing(t, "cgroup-limits", format, args...)
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(testTimeout); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in time")
		}
	}
}

func TestParseCgroup2Mount(t *testing.T) {
	hybrid := `25 30 0:23 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755
41 25 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw
42 25 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
`
	mount, root, err := parseCgroup2Mount([]byte(hybrid))
	if err != nil || mount != "/sys/fs/cgroup/unified" || root != "/" {
		t.Fatalf("hybrid: %q %q %v", mount, root, err)
	}
	nested := `1 0 0:1 /kubepods/pod\0401 /sys/fs/cgroup rw - cgroup2 cgroup2 rw` + "\n"
	mount, root, err = parseCgroup2Mount([]byte(nested))
	if err != nil || mount != "/sys/fs/cgroup" || root != "/kubepods/pod 1" {
		t.Fatalf("nested: %q %q %v", mount, root, err)
	}
	if _, _, err := parseCgroup2Mount([]byte("42 25 0:39 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n")); err == nil {
		t.Fatal("v1 only: no error")
	}
}

func FuzzParseCgroup2Mount(f *testing.F) {
	f.Add([]byte("41 25 0:38 / /sys/fs/cgroup/unified rw,relatime shared:9 - cgroup2 cgroup2 rw\n"))
	f.Add([]byte("1 0 0:1 /a\\040b /x rw - cgroup2 cgroup2 rw\n- - - -\n"))
	f.Add([]byte("\\\\\\ - cgroup2"))
	f.Fuzz(func(t *testing.T, b []byte) {
		mount, root, err := parseCgroup2Mount(b)
		if err == nil && (mount == "" || root == "") {
			t.Fatalf("empty mount %q or root %q without an error", mount, root)
		}
	})
}

// BenchmarkStartTrue measures what a cgroup adds to a command's start:
// /bin/true with and without its own cgroup (made, entered by clone3,
// removed).
func BenchmarkStartTrue(b *testing.B) {
	run := func(b *testing.B, attr func() (*syscall.SysProcAttr, func())) {
		for b.Loop() {
			a, done := attr()
			cmd := exec.Command("/bin/true")
			cmd.SysProcAttr = a
			if err := cmd.Run(); err != nil {
				b.Fatal(err)
			}
			done()
		}
	}
	b.Run("process-group", func(b *testing.B) {
		run(b, func() (*syscall.SysProcAttr, func()) { return &syscall.SysProcAttr{Setpgid: true}, func() {} })
	})
	b.Run("cgroup", func(b *testing.B) {
		m, err := Open(Config{})
		if err != nil {
			testdeps.Missing(b, "cgroup", "%v", err)
		}
		defer m.Close()
		run(b, func() (*syscall.SysProcAttr, func()) {
			cg, err := m.New()
			if err != nil {
				b.Fatal(err)
			}
			return &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: true, CgroupFD: cg.FD()}, func() { cg.Started(); cg.Release() }
		})
	})
}
