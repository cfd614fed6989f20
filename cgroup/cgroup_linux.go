//go:build linux

package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// killWait bounds how long a kill waits for a cgroup to empty.
const killWait = 2 * time.Second

// managers counts the Managers this process has opened.
var managers atomic.Uint64

// Manager makes and removes the per-command cgroups of one executor.
type Manager struct {
	cfg    Config
	base   string // M/X
	dir    string // M/X/outpost-<pid>
	status Status
	seq    atomic.Uint64

	mu        sync.Mutex
	lingering []*Cgroup // oldest first; at most cfg.MaxLingering
	closed    bool
	stop      chan struct{} // closed by Close: ends the sweeper
}

// Open prepares per-command cgroups under the executor's own cgroup. The
// error wraps ErrUnavailable with the reason when they cannot be used.
func Open(cfg Config) (*Manager, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.MaxLingering == 0 {
		cfg.MaxLingering = DefaultConfig().MaxLingering
	}
	if cfg.SweepEvery == 0 {
		cfg.SweepEvery = DefaultConfig().SweepEvery
	}
	base, err := executorBase()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if !kernelAtLeast(5, 7) {
		return nil, fmt.Errorf("%w: starting a process inside a cgroup needs Linux 5.7 (CLONE_INTO_CGROUP)", ErrUnavailable)
	}
	m := &Manager{cfg: cfg, base: base}
	// A second manager in one process gets a directory of its own, so a
	// Cgroup of a closed manager can never name a live one's command.
	name := fmt.Sprintf("outpost-%d", os.Getpid())
	if k := managers.Add(1); k > 1 {
		name += fmt.Sprintf(".%d", k)
	}
	m.dir = filepath.Join(m.base, name)
	m.status.Swept = sweepStale(m.base)
	if _, err := os.Stat(m.dir); err == nil {
		// Ours by pid but not by us: left by a process whose pid we got.
		removeTree(m.dir)
	}
	if err := os.Mkdir(m.dir, 0o755); err != nil {
		return nil, fmt.Errorf("%w: cannot create %s: %v", ErrUnavailable, m.dir, errnoText(err))
	}
	m.status.Dir = m.dir
	_, err = os.Stat(filepath.Join(m.dir, "cgroup.kill"))
	m.status.KillFile = err == nil
	m.status.NoLimits = m.enableControllers()
	m.stop = make(chan struct{})
	go m.sweeper()
	return m, nil
}

// The executor's cgroup as it was at the first Open: after a move into
// outpost-<pid>-self, later Managers still work beside that, not inside.
var (
	baseMu   sync.Mutex
	baseDir  string
	selfMove sync.Mutex // one move at a time
)

func executorBase() (string, error) {
	baseMu.Lock()
	defer baseMu.Unlock()
	if baseDir == "" {
		mount, rel, err := ownCgroup()
		if err != nil {
			return "", err
		}
		baseDir = filepath.Join(mount, rel)
	}
	return baseDir, nil
}

// ProbeMachine inspects this machine's cgroups without changing them.
func ProbeMachine() Probe {
	mount, rel, err := ownCgroup()
	if err != nil {
		return Probe{Unavailable: fmt.Errorf("%w: %v", ErrUnavailable, err)}
	}
	p := Probe{Base: filepath.Join(mount, rel)}
	switch {
	case !kernelAtLeast(5, 7):
		p.Unavailable = fmt.Errorf("%w: starting a process inside a cgroup needs Linux 5.7 (CLONE_INTO_CGROUP)", ErrUnavailable)
	case unix.Access(p.Base, unix.W_OK) != nil:
		p.Unavailable = fmt.Errorf("%w: %s is not writable", ErrUnavailable, p.Base)
	}
	for _, c := range strings.Fields(readFile(filepath.Join(p.Base, "cgroup.controllers"))) {
		if c == "memory" || c == "pids" {
			p.Controllers = append(p.Controllers, c)
		}
	}
	p.KillFile = kernelAtLeast(5, 14)
	return p
}

// enableControllers delegates memory and pids to the commands' cgroups as
// far as the configured limits need them, and returns why not where it
// cannot.
func (m *Manager) enableControllers() string {
	var want []string
	if m.cfg.MemoryMax > 0 {
		want = append(want, "memory")
	}
	if m.cfg.PidsMax > 0 {
		want = append(want, "pids")
	}
	if len(want) == 0 {
		return ""
	}
	available := strings.Fields(readFile(filepath.Join(m.base, "cgroup.controllers")))
	var enable, missing []string
	for _, c := range want {
		if slices.Contains(available, c) {
			enable = append(enable, c)
		} else {
			missing = append(missing, c)
		}
	}
	var reasons []string
	if len(missing) > 0 {
		reasons = append(reasons, fmt.Sprintf("the %s controller%s not available to %s (bound to cgroup v1, or not delegated)",
			strings.Join(missing, " and "), map[bool]string{true: "s are", false: " is"}[len(missing) > 1], m.base))
	}
	if len(enable) > 0 {
		if err := m.delegate(enable); err != nil {
			reasons = append(reasons, err.Error())
			enable = nil
		}
	}
	for _, c := range enable {
		switch c {
		case "memory":
			m.status.MemoryMax = m.cfg.MemoryMax
		case "pids":
			m.status.PidsMax = m.cfg.PidsMax
		}
	}
	m.status.Controllers = enable
	return strings.Join(reasons, "; ")
}

// delegate enables controllers in base (moving the executor out of it if
// the kernel insists) and in the executor's directory.
func (m *Manager) delegate(controllers []string) error {
	line := "+" + strings.Join(controllers, " +")
	baseCtl := filepath.Join(m.base, "cgroup.subtree_control")
	selfMove.Lock()
	defer selfMove.Unlock()
	err := os.WriteFile(baseCtl, []byte(line), 0)
	if errors.Is(err, syscall.EBUSY) {
		// M/X holds processes: move ourselves into a leaf and try again.
		self := filepath.Join(m.base, fmt.Sprintf("outpost-%d-self", os.Getpid()))
		if err := os.Mkdir(self, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			return fmt.Errorf("cannot create %s to vacate %s: %v", self, m.base, errnoText(err))
		}
		if err := os.WriteFile(filepath.Join(self, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			os.Remove(self)
			return fmt.Errorf("cannot move the executor into %s: %v", self, errnoText(err))
		}
		m.status.Moved = true
		err = os.WriteFile(baseCtl, []byte(line), 0)
		if errors.Is(err, syscall.EBUSY) {
			return fmt.Errorf("%s is shared with other processes, so its controllers cannot be delegated to commands (give the executor a cgroup of its own, e.g. a systemd unit with Delegate=yes)", m.base)
		}
	}
	if err != nil {
		return fmt.Errorf("cannot enable %s in %s: %v", strings.Join(controllers, ", "), baseCtl, errnoText(err))
	}
	if err := os.WriteFile(filepath.Join(m.dir, "cgroup.subtree_control"), []byte(line), 0); err != nil {
		return fmt.Errorf("cannot enable %s in %s: %v", strings.Join(controllers, ", "), m.dir, errnoText(err))
	}
	return nil
}

// Status reports what the manager enforces.
func (m *Manager) Status() Status { return m.status }

// Cgroup is one command's cgroup.
type Cgroup struct {
	m   *Manager
	dir string
	fd  int // O_PATH directory, for CLONE_INTO_CGROUP; -1 once closed
}

// New makes a cgroup for the next command, with the configured limits.
// Start the command with UseCgroupFD and FD(), then call Started.
func (m *Manager) New() (*Cgroup, error) {
	m.mu.Lock()
	closed := m.closed
	m.mu.Unlock()
	if closed {
		return nil, errors.New("cgroup: the manager is closed")
	}
	dir := filepath.Join(m.dir, fmt.Sprintf("cmd-%d", m.seq.Add(1)))
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	fail := func(err error) (*Cgroup, error) {
		os.Remove(dir)
		return nil, fmt.Errorf("cgroup: %w", err)
	}
	if m.status.MemoryMax > 0 {
		if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(strconv.FormatInt(m.status.MemoryMax, 10)), 0); err != nil {
			return fail(err)
		}
		// The OOM killer takes the whole command, not one random member
		// that leaves the rest half-working.
		os.WriteFile(filepath.Join(dir, "memory.oom.group"), []byte("1"), 0)
	}
	if m.status.PidsMax > 0 {
		if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(m.status.PidsMax, 10)), 0); err != nil {
			return fail(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fail(err)
	}
	return &Cgroup{m: m, dir: dir, fd: fd}, nil
}

// FD is the cgroup's directory, for syscall.SysProcAttr.CgroupFD.
func (c *Cgroup) FD() int { return c.fd }

// Dir is the cgroup's directory.
func (c *Cgroup) Dir() string { return c.dir }

// Started closes the descriptor once the command runs in the cgroup.
func (c *Cgroup) Started() {
	if c.fd >= 0 {
		unix.Close(c.fd)
		c.fd = -1
	}
}

// Procs lists the processes in the cgroup.
func (c *Cgroup) Procs() []int { return readPids(c.dir) }

// Populated reports whether any process is left in the cgroup.
func (c *Cgroup) Populated() bool { return populated(c.dir) }

// Signal sends sig to every process in the cgroup.
func (c *Cgroup) Signal(sig syscall.Signal) {
	for _, pid := range c.Procs() {
		unix.Kill(pid, sig)
	}
}

// Kill kills every process in the cgroup, including any a member forks
// while it is being killed.
func (c *Cgroup) Kill() { killDir(c.dir) }

// OOMKills is how many processes the OOM killer took under memory.max.
func (c *Cgroup) OOMKills() int {
	return int(eventCount(filepath.Join(c.dir, "memory.events"), "oom_kill"))
}

// PidsMaxHits is how many forks pids.max refused.
func (c *Cgroup) PidsMaxHits() int {
	return int(eventCount(filepath.Join(c.dir, "pids.events"), "max"))
}

// Release removes the cgroup once the command is finished. Background
// processes the command left running keep it until they end (bounded by
// Config.MaxLingering).
func (c *Cgroup) Release() {
	c.Started()
	if os.Remove(c.dir) == nil {
		return
	}
	m := c.m
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return
	}
	m.sweepLocked()
	if len(m.lingering) >= m.cfg.MaxLingering {
		oldest := m.lingering[0]
		m.lingering = m.lingering[1:]
		oldest.Kill()
		waitEmpty(oldest.dir, killWait)
		os.Remove(oldest.dir)
	}
	m.lingering = append(m.lingering, c)
}

// Lingering counts the cgroups of finished commands still holding
// processes.
func (m *Manager) Lingering() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.lingering)
}

// sweeper removes lingering cgroups once they have emptied: a command
// whose last background process ends (or was killed and is still dying
// when its cgroup is released) leaves no directory behind, whether or not
// another command starts.
func (m *Manager) sweeper() {
	t := time.NewTicker(m.cfg.SweepEvery)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.mu.Lock()
			if len(m.lingering) > 0 {
				m.sweepLocked()
			}
			m.mu.Unlock()
		}
	}
}

// sweepLocked removes lingering cgroups that have emptied.
func (m *Manager) sweepLocked() {
	m.lingering = slices.DeleteFunc(m.lingering, func(c *Cgroup) bool { return os.Remove(c.dir) == nil })
}

// Close kills every process left in the executor's cgroups and removes
// them. Call it after the commands have been terminated.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return
	}
	m.closed = true
	m.lingering = nil
	close(m.stop)
	m.mu.Unlock()
	removeTree(m.dir)
}

// removeTree kills everything under dir and removes dir and its children.
func removeTree(dir string) {
	killDir(dir) // cgroup.kill reaches descendants too
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			sub := filepath.Join(dir, e.Name())
			killDir(sub)
			waitEmpty(sub, killWait)
			os.Remove(sub)
		}
	}
	waitEmpty(dir, killWait)
	os.Remove(dir)
}

// killDir kills the cgroup at dir with cgroup.kill, or where the kernel
// has none (before 5.14), freezes it and kills its members.
func killDir(dir string) {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0); err == nil {
		return
	}
	freeze := filepath.Join(dir, "cgroup.freeze")
	frozen := os.WriteFile(freeze, []byte("1"), 0) == nil
	for range 100 {
		pids := readPids(dir)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		if !frozen {
			time.Sleep(time.Millisecond)
		}
	}
	if frozen {
		os.WriteFile(freeze, []byte("0"), 0) // SIGKILL is delivered as it thaws
	}
}

// waitEmpty polls until dir holds no process or d has passed.
func waitEmpty(dir string, d time.Duration) {
	deadline := time.Now().Add(d)
	for populated(dir) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

var staleName = regexp.MustCompile(`^outpost-([0-9]+)(\.[0-9]+|-self)?$`)

// sweepStale kills and removes the cgroups of executors that died without
// closing theirs, and returns how many it removed.
func sweepStale(base string) int {
	entries, err := os.ReadDir(base)
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		sm := staleName.FindStringSubmatch(e.Name())
		if sm == nil || !e.IsDir() {
			continue
		}
		pid, err := strconv.Atoi(sm[1])
		if err != nil || pid == os.Getpid() || alive(pid) {
			continue
		}
		removeTree(filepath.Join(base, e.Name()))
		n++
	}
	return n
}

func alive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || errors.Is(err, unix.EPERM)
}

// ownCgroup finds the cgroup2 mount and the executor's cgroup relative to
// it.
func ownCgroup() (mount, rel string, err error) {
	cg, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", "", err
	}
	path := ""
	for _, line := range strings.Split(string(cg), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	if path == "" {
		return "", "", errors.New("this process is in no cgroup v2 (cgroup v1 only)")
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", "", err
	}
	mount, root, err := parseCgroup2Mount(mi)
	if err != nil {
		return "", "", err
	}
	rel, err = filepath.Rel(root, path)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", "", fmt.Errorf("this process's cgroup %s is outside the cgroup2 mount at %s (root %s)", path, mount, root)
	}
	return mount, rel, nil
}

// parseCgroup2Mount returns the first cgroup2 mount in a mountinfo table
// and the cgroup path of its root.
func parseCgroup2Mount(mountinfo []byte) (mount, root string, err error) {
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		sep := slices.Index(fields, "-")
		if sep < 5 || sep+1 >= len(fields) || fields[sep+1] != "cgroup2" {
			continue
		}
		return unescapeMountinfo(fields[4]), unescapeMountinfo(fields[3]), nil
	}
	return "", "", errors.New("cgroup2 is not mounted")
}

// unescapeMountinfo undoes mountinfo's octal escapes (\040 for a space).
func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func readFile(p string) string {
	b, _ := os.ReadFile(p)
	return string(b)
}

func readPids(dir string) []int {
	var pids []int
	for _, f := range strings.Fields(readFile(filepath.Join(dir, "cgroup.procs"))) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			pids = append(pids, pid)
		}
	}
	return pids
}

func populated(dir string) bool {
	ev := readFile(filepath.Join(dir, "cgroup.events"))
	if ev == "" {
		return len(readPids(dir)) > 0
	}
	return eventCountIn(ev, "populated") > 0
}

func eventCount(file, key string) int64 { return eventCountIn(readFile(file), key) }

func eventCountIn(text, key string) int64 {
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, key+" "); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	rel := unix.ByteSliceToString(u.Release[:])
	var ma, mi int
	fmt.Sscanf(rel, "%d.%d", &ma, &mi)
	return ma > major || ma == major && mi >= minor
}

// errnoText keeps the errno of a path error and drops the path the caller
// already names.
func errnoText(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err.Error()
	}
	return err.Error()
}
