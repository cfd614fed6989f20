//go:build linux

package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// helperExitCode is the exit status of a helper that could not set the
// sandbox up (the command never ran); its stderr says why.
const helperExitCode = 126

// IsHelper reports whether this process was started as the helper.
func IsHelper() bool { return filepath.Base(os.Args[0]) == HelperName }

// HelperMain sets up the sandbox and executes the command; it never
// returns. A helper started per command reads its spec from the
// environment; a pre-started one (pooledArg) waits on its socket for one
// command (pooled_linux.go). Either way runCommand does the rest.
func HelperMain() {
	// Every restriction is applied to this thread only, which then execs
	// the command (or forks it, as a PID namespace's init): cheaper than
	// synchronising all the runtime's threads. Never unlocked.
	runtime.LockOSThread()
	if len(os.Args) == 2 && os.Args[1] == holdArg {
		holdNamespace()
	}
	if len(os.Args) >= 2 && os.Args[1] == pooledArg {
		pooledMain()
	}
	raw, ok := os.LookupEnv(helperPolicyEnv)
	if !ok {
		helperFail("no sandbox spec (%s is not set); this binary runs as the sandbox helper only when the executor starts it", helperPolicyEnv)
	}
	os.Unsetenv(helperPolicyEnv)
	var sp spec
	if err := json.Unmarshal([]byte(raw), &sp); err != nil {
		helperFail("bad sandbox spec: %v", err)
	}
	// PID 1: the init of the command's PID namespace, which must catch
	// signals. Enabling each is a handshake with the runtime's signal
	// thread (about 0.6 ms for these seven here); it runs beside the
	// set-up below instead of before the fork.
	var caught <-chan struct{}
	if sp.MountNamespace && os.Getpid() == 1 {
		caught = catchSignals()
	}
	env := os.Environ()
	if sp.CommandEnv != nil {
		env = lastOfEachName(sp.CommandEnv) // as exec.Cmd would have
		// What the command's PATH lookup reads: this process's
		// environment (PATH alone; nothing the dynamic loader reads).
		os.Unsetenv("PATH")
		for _, kv := range env {
			if v, ok := cutEnv(kv, "PATH"); ok {
				os.Setenv("PATH", v)
			}
		}
	}
	runCommand(sp, os.Args[1:], env, caught, nil, nil)
}

// prebuilt is what a pooled helper makes before its command exists: the
// PID namespace's /proc, the Landlock rulesets of the system paths (on
// /proc's new inode), one for the network on and one off, and the seccomp
// filter of every command of its shape (set-ID modes denied or not), in
// force on the helper's thread already (a command with the network off
// adds the small network filter), and the bounding set without the
// capabilities every command loses. A nil *prebuilt has nothing: everything
// is made for the command.
type prebuilt struct {
	procMounted bool
	// placeholdersMade waits until the executor has made the
	// placeholders this helper is to protect (PooledHelper.Proceed).
	placeholdersMade func() error
	landlock         [2]*preparedLandlock // [network off]; nil: make at the command
	// seccompDenySetID says which base filter is installed; nil: none.
	seccompDenySetID *bool
	networkFilter    []unix.SockFilter
}

// prebuild makes what it can; what fails is left to the command's set-up,
// which reports it.
func prebuild(denySetID bool) *prebuilt {
	pre := &prebuilt{procMounted: mountProc() == nil}
	dropBounding(boundingCapsDropped)
	for i, denyTCP := range []bool{false, true} {
		if pl, err := systemLandlock(denyTCP); err == nil {
			pre.landlock[i] = pl
		}
	}
	netProg, err := buildSeccompNetworkProgram()
	if err != nil {
		return pre
	}
	prog, err := buildSeccompProgram(SeccompOptions{DenySetID: denySetID})
	if err == nil && installSeccompProgram(prog, true) == nil {
		pre.seccompDenySetID, pre.networkFilter = &denySetID, netProg
	}
	return pre
}

// systemLandlock makes the ruleset every command starts from: the system
// paths readable, the usual devices writable, TCP denied or not.
func systemLandlock(denyTCP bool) (*preparedLandlock, error) {
	pl, _, err := prepareLandlock(LandlockRules{ReadOnly: DefaultReadOnlySystemPaths(), ReadWrite: DefaultReadWriteDevices(), DenyTCP: denyTCP, ThisThreadOnly: true})
	return pl, err
}

func (p *prebuilt) ruleset(networkOff bool) *preparedLandlock {
	if p == nil {
		return nil
	}
	return p.landlock[boolIndex(networkOff)]
}

// installSeccomp completes the filter for sp: nothing more than the base
// filter with the network on; the network filter on top with it off.
// Without a prebuilt base filter of sp's set-ID choice, it installs the
// whole filter (stacked on any other: stricter, never looser).
func (p *prebuilt) installSeccomp(sp spec) error {
	if p == nil || p.seccompDenySetID == nil || *p.seccompDenySetID != sp.DenySetID {
		return InstallSeccomp(SeccompOptions{DenyNetwork: !sp.Network, DenySetID: sp.DenySetID, ThisThreadOnly: true})
	}
	if sp.Network {
		return nil
	}
	return installSeccompProgram(p.networkFilter, true)
}

// close drops the rulesets: the command must not inherit them.
func (p *prebuilt) close() {
	if p != nil {
		p.landlock[0].close()
		p.landlock[1].close()
	}
}

func boolIndex(b bool) int {
	if b {
		return 1
	}
	return 0
}

// helperFail reports why the sandbox could not be set up and exits with
// helperExitCode: the command never ran.
func helperFail(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "outpost-sandbox: "+format+"\n", args...)
	os.Exit(helperExitCode)
}

// runCommand applies the per-command set-up and runs the command. Order:
// mount namespace changes (protected sub-paths read-only, "none" paths
// hidden), no_new_privs, Landlock, dropping the capabilities that could
// undo the mounts, the seccomp filter (last: it also restricts what the
// set-up itself may do), then execve — or, as the PID namespace's init
// (caught non-nil), fork the command and wait for it. report, if set, is
// told the exit status once nothing but this helper is left in the
// namespace, before the helper's own exit (which waits for the
// namespaces to be torn down).
func runCommand(sp spec, args, env []string, caught <-chan struct{}, report func(code int), pre *prebuilt) {
	fail := helperFail
	if len(args) > 0 && args[0] == "--" {
		args = args[1:]
	}
	if len(args) == 0 {
		fail("no command")
	}
	if err := applyMounts(sp, pre != nil && pre.procMounted); err != nil {
		fail("%v", err)
	}
	// The Landlock rules of the command's own paths attach to their inodes
	// (the workspaces' mounts are in place), which the read-only clones
	// protectAll puts on the protected names keep.
	var ll *preparedLandlock
	if !sp.FullWrite {
		ll = pre.ruleset(!sp.Network)
		var err error
		if ll == nil {
			ll, err = systemLandlock(!sp.Network)
		}
		// The command's own paths are added as they are now: one removed
		// since the policy was resolved (another command's placeholder)
		// gets no rule, which denies it.
		if err == nil {
			err = ll.addPaths(sp.ReadOnly, sp.ReadWrite)
		}
		if err != nil {
			fail("landlock: %v", err)
		}
	}
	if pre != nil && pre.placeholdersMade != nil {
		if err := pre.placeholdersMade(); err != nil {
			fail("%v", err)
		}
	}
	if err := protectAll(sp); err != nil {
		fail("%v", err)
	}
	if sp.Dir != "" {
		if err := os.Chdir(sp.Dir); err != nil {
			fail("entering the working directory: %v", err)
		}
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fail("no_new_privs: %v", err)
	}
	if ll != nil {
		if err := ll.restrictSelf(); err != nil {
			fail("landlock: %v", err)
		}
		if pre == nil {
			ll.close()
		}
	}
	pre.close()
	// Nothing the executor held open reaches the command: only stdin,
	// stdout and stderr cross the exec.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		fail("marking inherited descriptors close-on-exec: %v", err)
	}
	if err := applyLimits(sp.Limits); err != nil {
		fail("%v", err)
	}
	if pre != nil {
		// The rest went before the command existed (prebuild).
		if !sp.Network {
			dropBounding(networkCapsDropped)
		}
	} else {
		dropCapabilities(sp)
	}
	if err := pre.installSeccomp(sp); err != nil {
		fail("seccomp: %v", err)
	}
	path := args[0]
	if !strings.Contains(path, "/") {
		p, err := exec.LookPath(path)
		if err != nil {
			fail("%s: %v", path, err)
		}
		path = p
	}
	argv := append([]string(nil), args...)
	if sp.Arg0 != "" {
		argv[0] = sp.Arg0
	}
	if caught != nil {
		<-caught
		code := runAsInit(path, argv, env, fail)
		if report != nil {
			// The command's status is final; whatever it left in the
			// namespace goes first, so that the executor may treat the
			// command as gone (and undo what it set up for it) the
			// moment it hears.
			syscall.Kill(-1, syscall.SIGKILL)
			for {
				if _, err := syscall.Wait4(-1, nil, 0, nil); err != nil && err != syscall.EINTR {
					break
				}
			}
			report(code)
		}
		os.Exit(code)
	}
	err := syscall.Exec(path, argv, env)
	fail("exec %s: %v", path, err)
}

// catchSignals makes the helper catch and drop the signals that are sent
// to the command's process group (rather than ignore them, which the
// command would inherit), and closes the returned channel once they are
// caught.
func catchSignals() <-chan struct{} {
	done := make(chan struct{})
	go func() {
		sigs := make(chan os.Signal, 16)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH)
		close(done)
		for range sigs {
		}
	}()
	return done
}

// runAsInit runs the command as the only child of this helper, the init
// of the command's PID namespace: it reaps orphans, and returns the
// command's exit status (128+n for a signal) once the command exits — the
// kernel then ends whatever else is left in the namespace. Signals sent
// to the process group reach the command directly; the helper has caught
// them (catchSignals) and drops them.
func runAsInit(path string, argv, env []string, fail func(string, ...any)) int {
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{
		Env:   env,
		Files: []uintptr{0, 1, 2},
		Sys:   &syscall.SysProcAttr{Foreground: false},
	})
	if err != nil {
		fail("exec %s: %v", path, err)
	}
	// The command's output ends when the command's descriptors close, not
	// when this helper exits.
	for fd := range 3 {
		syscall.Close(fd)
	}
	for {
		var ws syscall.WaitStatus
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return helperExitCode
		}
		if wpid != pid {
			continue // an orphan, reaped
		}
		if ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ws.ExitStatus()
	}
}

// applyLimits sets the command's resource limits; core dumps are off.
func applyLimits(l Limits) error {
	set := func(name string, res int, v uint64) error {
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: v, Max: v}); err != nil {
			return fmt.Errorf("setting %s to %d: %w", name, v, err)
		}
		return nil
	}
	if err := set("RLIMIT_CORE", unix.RLIMIT_CORE, 0); err != nil {
		return err
	}
	if l.OpenFiles > 0 {
		if err := set("RLIMIT_NOFILE", unix.RLIMIT_NOFILE, l.OpenFiles); err != nil {
			return err
		}
	}
	if l.FileSize > 0 {
		if err := set("RLIMIT_FSIZE", unix.RLIMIT_FSIZE, l.FileSize); err != nil {
			return err
		}
	}
	if l.Processes > 0 {
		if err := set("RLIMIT_NPROC", unix.RLIMIT_NPROC, l.Processes); err != nil {
			return err
		}
	}
	return nil
}

// boundingCapsDropped are removed from the bounding set of every
// sandboxed command: those a command running as root could use to undo
// the sandbox's mounts or reach around it. Landlock does not cover chmod,
// chown or xattrs, so a root command must not keep the capabilities that
// bypass file ownership either. networkCapsDropped go too with the
// network off.
var (
	boundingCapsDropped = []uintptr{unix.CAP_SYS_ADMIN, unix.CAP_SYS_PTRACE, unix.CAP_SYS_MODULE, unix.CAP_SYS_RAWIO,
		unix.CAP_CHOWN, unix.CAP_FOWNER, unix.CAP_FSETID, unix.CAP_MKNOD, unix.CAP_SETFCAP,
		unix.CAP_LINUX_IMMUTABLE, unix.CAP_DAC_OVERRIDE, unix.CAP_DAC_READ_SEARCH, unix.CAP_SYS_CHROOT, unix.CAP_SYS_BOOT}
	networkCapsDropped = []uintptr{unix.CAP_NET_ADMIN, unix.CAP_NET_RAW}
)

// dropCapabilities removes sp's capabilities from the bounding set. The
// bounding set limits what an execve grants, not what this helper holds:
// its set-up keeps working.
func dropCapabilities(sp spec) {
	dropBounding(boundingCapsDropped)
	if !sp.Network {
		dropBounding(networkCapsDropped)
	}
}

func dropBounding(caps []uintptr) {
	for _, c := range caps {
		unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0) // EPERM without CAP_SETPCAP: nothing to drop
	}
}

// canUnshareMount probes whether a child can get a user and mount
// namespace (what protected sub-paths need).
func canUnshareMount() bool {
	// Any program will do: /bin/true, or else this binary (a container
	// image may have no /bin/true), started as the helper with no spec,
	// which exits at once. All that matters is whether the clone into
	// new namespaces succeeded.
	cmd := exec.Command("/bin/true")
	if _, err := os.Stat("/bin/true"); err != nil {
		bin, err := self()
		if err != nil {
			return false
		}
		cmd = exec.Command(bin)
		cmd.Args = []string{HelperName}
		cmd.Env = []string{}
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	var user *User
	if os.Geteuid() == 0 {
		user = &DefaultUser // root maps to an unprivileged id: check that works
	}
	usernsAttr(cmd.SysProcAttr, user)
	if err := cmd.Start(); err != nil {
		return false
	}
	cmd.Wait()
	return true
}

// canIDMap probes whether this kernel makes ID-mapped mounts (Linux 5.12+)
// of the temporary directory's file system.
func canIDMap() bool {
	if os.Geteuid() != 0 {
		return false
	}
	dir, err := os.MkdirTemp("", "outpost-idmap-probe-")
	if err != nil {
		return false
	}
	defer os.Remove(dir)
	f, err := cloneForUser(dir, true, DefaultUser)
	if err != nil {
		return false
	}
	f.Close()
	return true
}
