//go:build linux

package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/landlock-lsm/go-landlock/landlock"
	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	llsyscall "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"
)

// LandlockRules describe filesystem and network access for the sandboxed
// command. Everything not listed is denied: no read, no write, no execute.
// Callers therefore list system directories (DefaultReadOnlySystemPaths)
// and the usual devices (DefaultReadWriteDevices) themselves.
//
// Paths must be absolute. A path that does not exist is skipped and named
// in LandlockResult.Missing. A path that is a symlink grants access to its
// target (the rule is attached to the resolved inode, as Landlock does).
type LandlockRules struct {
	// ReadOnly paths (directories or files) are readable and executable:
	// read files, list directories, execute.
	ReadOnly []string
	// ReadWrite paths are fully writable: everything ReadOnly grants plus
	// write, create (files, directories, symlinks, FIFOs, sockets), remove,
	// rename and link within and between ReadWrite hierarchies (ABI >= 2),
	// truncate (ABI >= 3), ioctl on devices (ABI >= 5) and connecting to
	// Unix sockets found there (ABI >= 9). Creating character or block
	// device nodes is never granted: a device node in a writable directory
	// would bypass every path rule.
	ReadWrite []string
	// DenyTCP denies TCP bind and connect (needs Landlock ABI >= 4).
	DenyTCP bool
	// ThisThreadOnly restricts only the calling thread (which must hold
	// runtime.LockOSThread for good and is about to execve) instead of
	// every thread of the process.
	ThisThreadOnly bool
	// The best ABI the kernel has is always used ("best effort"); rights
	// the kernel cannot restrict are reported in LandlockResult.Missing,
	// never silently dropped.
}

// LandlockResult says what was enforced.
type LandlockResult struct {
	// ABI is the kernel's Landlock ABI version (0 = unavailable).
	ABI int
	// FilesystemEnforced: the filesystem rules are in force.
	FilesystemEnforced bool
	// NetworkEnforced: TCP bind/connect are restricted.
	NetworkEnforced bool
	// Missing lists, for people, the requested restrictions the kernel
	// could not enforce (e.g. "truncate (needs ABI 3)", "TCP bind/connect
	// (needs ABI 4)") and listed paths that were skipped because they do
	// not exist.
	Missing []string
}

// ErrLandlockUnavailable is wrapped by ApplyLandlock's error when the kernel
// has no usable Landlock (ABI 0).
var ErrLandlockUnavailable = errors.New("landlock is not available on this kernel")

// Access right groups (see the kernel's landlock.h).
const (
	llFileRights = llsys.AccessFSExecute | llsys.AccessFSWriteFile | llsys.AccessFSReadFile |
		llsys.AccessFSTruncate | llsys.AccessFSIoctlDev
	llReadRights = llsys.AccessFSExecute | llsys.AccessFSReadFile | llsys.AccessFSReadDir
	// llNeverGranted: device nodes created inside a writable directory
	// would give raw access to disks or memory regardless of path rules.
	llNeverGranted = llsys.AccessFSMakeChar | llsys.AccessFSMakeBlock

	llTCPRights = llsys.AccessNetBindTCP | llsys.AccessNetConnectTCP
	llScopes    = llsys.ScopeAbstractUnixSocket | llsys.ScopeSignal
)

// llConfigs are the library's per-ABI presets, index = ABI version.
var llConfigs = []landlock.Config{
	{}, landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5,
	landlock.V6, landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// LandlockABI returns the kernel's Landlock ABI version, 0 if Landlock is
// unavailable (not built in, disabled at boot, or the syscall is blocked).
func LandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// landlockUnavailableReason explains why LandlockABI is 0.
func landlockUnavailableReason() string {
	_, err := llsys.LandlockGetABIVersion()
	switch {
	case err == nil:
		return "landlock_create_ruleset reported no ABI"
	case errors.Is(err, unix.ENOSYS):
		return "landlock_create_ruleset: ENOSYS (kernel built without CONFIG_SECURITY_LANDLOCK, kernel older than 5.13, or the syscall is blocked by a seccomp filter)"
	case errors.Is(err, unix.EOPNOTSUPP):
		return "landlock_create_ruleset: EOPNOTSUPP (Landlock is built in but not enabled at boot: add landlock to the lsm= kernel parameter or CONFIG_LSM)"
	case errors.Is(err, unix.EPERM):
		return "landlock_create_ruleset: EPERM (probably blocked by a container's seccomp filter)"
	default:
		return "landlock_create_ruleset: " + err.Error()
	}
}

// llLibraryABI is the ABI version go-landlock will use: it caps at the
// newest version it knows and treats ABI 6+ kernels without the signal
// scoping fix (erratum 2) as ABI 5.
func llLibraryABI(abi int) int {
	if abi >= len(llConfigs) {
		abi = len(llConfigs) - 1
	}
	if abi >= 6 {
		if errata, err := llsys.LandlockGetErrata(); err != nil || errata&0x2 == 0 {
			abi = 5
		}
	}
	return abi
}

// landlockGaps lists what the kernel (at ABI abi, library ABI lib) cannot
// restrict among what ApplyLandlock always asks for.
func landlockGaps(abi, lib int, denyTCP bool) []string {
	var gaps []string
	if abi < 3 {
		gaps = append(gaps, "truncate (needs ABI 3)")
	}
	if abi < 4 && denyTCP {
		gaps = append(gaps, "TCP bind/connect (needs ABI 4)")
	}
	if abi < 5 {
		gaps = append(gaps, "ioctl on device files (needs ABI 5)")
	}
	if lib < 6 {
		gaps = append(gaps, "signals and abstract Unix sockets to processes outside the sandbox (needs ABI 6)")
	}
	if abi < 9 {
		gaps = append(gaps, "connect/send to pathname Unix sockets outside the writable paths (needs ABI 9)")
	}
	if denyTCP && abi >= 4 && mptcpEnabled() {
		gaps = append(gaps, "MPTCP bind/connect (Landlock only restricts plain TCP and net.mptcp.enabled=1; block IPPROTO_MPTCP with seccomp)")
	}
	return gaps
}

// mptcpEnabled reports whether this network namespace accepts MPTCP
// sockets, which Landlock's TCP rules do not cover.
func mptcpEnabled() bool {
	b, err := os.ReadFile("/proc/sys/net/mptcp/enabled")
	if err != nil {
		return false // no MPTCP support built in
	}
	return strings.TrimSpace(string(b)) != "0"
}

// ApplyLandlock restricts the calling process (all threads) and its future
// children, irreversibly. It also sets no_new_privs. Paths that do not
// exist are skipped (listed in Missing) rather than failing; any other
// problem with a path is an error and nothing is enforced. It returns an
// error wrapping ErrLandlockUnavailable when the ABI is 0.
//
// Beyond the listed paths, on ABI >= 6 the process is also scoped: it
// cannot send signals to, or connect to abstract Unix sockets of,
// processes outside its Landlock domain.
//
// Landlock cannot restrict chmod, chown, setxattr, utime, stat or chdir on
// any path; a process with CAP_CHOWN/CAP_FOWNER can still change metadata
// of read-only files.
func ApplyLandlock(r LandlockRules) (LandlockResult, error) {
	if r.ThisThreadOnly {
		pl, res, err := prepareLandlock(r)
		if err != nil {
			return res, err
		}
		defer pl.close()
		return res, pl.restrictSelf()
	}
	cfg, rules, res, err := landlockConfig(r)
	if err != nil {
		return res, err
	}
	if err := cfg.Restrict(rules...); err != nil {
		return res, fmt.Errorf("sandbox: landlock (ABI %d): %w", res.ABI, err)
	}
	return res, nil
}

// landlockConfig is the configuration and the path rules of r for this
// kernel.
func landlockConfig(r LandlockRules) (landlock.Config, []landlock.Rule, LandlockResult, error) {
	abi := LandlockABI()
	res := LandlockResult{ABI: abi}
	if abi == 0 {
		res.Missing = append(res.Missing, "all filesystem restrictions (Landlock unavailable)")
		if r.DenyTCP {
			res.Missing = append(res.Missing, "TCP bind/connect (Landlock unavailable)")
		}
		return landlock.Config{}, nil, res, fmt.Errorf("sandbox: %w: %s", ErrLandlockUnavailable, landlockUnavailableReason())
	}
	lib := llLibraryABI(abi)

	// Strict configuration built for exactly what this kernel supports
	// (no library best-effort mode, which would silently drop rights, and
	// which turns "refer" on an ABI 1 kernel into no sandbox at all).
	cfg := llConfigs[lib]
	cfg.HandledAccessNet = 0
	if r.DenyTCP {
		cfg.HandledAccessNet = landlock.AccessNetSet(llTCPRights) & llConfigs[lib].HandledAccessNet
	}
	cfg.Scoped = landlock.ScopedSet(llScopes) & llConfigs[lib].Scoped
	handled := cfg.HandledAccessFS
	res.Missing = append(res.Missing, landlockGaps(abi, lib, r.DenyTCP)...)

	var rules []landlock.Rule
	err := eachLandlockPath(r.ReadOnly, r.ReadWrite, func(kind, p string, readWrite bool) error {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("sandbox: landlock %s path %q is not absolute", kind, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				res.Missing = append(res.Missing, fmt.Sprintf("%s path %s (does not exist, skipped)", kind, p))
				return nil
			}
			return fmt.Errorf("sandbox: landlock %s path: %w", kind, err)
		}
		if access := llPathRights(handled, readWrite, fi.IsDir()); access != 0 {
			rules = append(rules, landlock.PathAccess(access, p))
		}
		return nil
	})
	if err != nil {
		return cfg, nil, res, err
	}
	res.FilesystemEnforced = handled != 0
	res.NetworkEnforced = cfg.HandledAccessNet&llTCPRights == llTCPRights
	return cfg, rules, res, nil
}

// eachLandlockPath calls add for the read-only paths, then the read-write
// ones, until one fails.
func eachLandlockPath(readOnly, readWrite []string, add func(kind, path string, readWrite bool) error) error {
	for _, p := range readOnly {
		if err := add("read-only", p, false); err != nil {
			return err
		}
	}
	for _, p := range readWrite {
		if err := add("read-write", p, true); err != nil {
			return err
		}
	}
	return nil
}

// llPathRights is what a rule grants a path, of what the ruleset handles:
// read-only paths are readable and executable, read-write ones get every
// right but making device nodes; a file gets the file rights of those.
func llPathRights(handled landlock.AccessFSSet, readWrite, dir bool) landlock.AccessFSSet {
	var rights landlock.AccessFSSet = llReadRights
	if readWrite {
		rights = handled &^ llNeverGranted
	}
	if !dir {
		rights &= llFileRights
	}
	return rights & handled
}

// preparedLandlock is a ruleset made but not yet enforced on the calling
// thread: a pooled helper makes the system paths' part before its command
// exists (the inodes of /usr, /etc … are the same then and later) and adds
// the command's own paths once it knows them.
type preparedLandlock struct {
	fd      int // -1: the kernel handles nothing of what was asked
	flags   uint32
	abi     int
	handled landlock.AccessFSSet
}

// prepareLandlock makes r's ruleset; r.ThisThreadOnly is implied.
func prepareLandlock(r LandlockRules) (*preparedLandlock, LandlockResult, error) {
	cfg, rules, res, err := landlockConfig(r)
	if err != nil {
		return nil, res, err
	}
	fd, flags, err := cfg.NewRulesetFD(rules...)
	if err != nil {
		return nil, res, fmt.Errorf("sandbox: landlock (ABI %d): %w", res.ABI, err)
	}
	return &preparedLandlock{fd: fd, flags: flags, abi: res.ABI, handled: cfg.HandledAccessFS}, res, nil
}

// addPaths adds rules as landlockConfig makes them: read-only paths
// readable and executable, read-write ones fully writable, missing ones
// skipped.
func (p *preparedLandlock) addPaths(readOnly, readWrite []string) error {
	if p.fd < 0 {
		return nil
	}
	return eachLandlockPath(readOnly, readWrite, func(kind, path string, readWrite bool) error {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("sandbox: landlock %s path %q is not absolute", kind, path)
		}
		fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("sandbox: landlock %s path: %s: %w", kind, path, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("sandbox: landlock %s path: %s: %w", kind, path, err)
		}
		access := llPathRights(p.handled, readWrite, st.Mode&unix.S_IFMT == unix.S_IFDIR)
		if access == 0 {
			return nil
		}
		if err := llsys.LandlockAddPathBeneathRule(p.fd, &llsys.PathBeneathAttr{AllowedAccess: uint64(access), ParentFd: fd}, 0); err != nil {
			return fmt.Errorf("sandbox: landlock %s path: %s: %w", kind, path, err)
		}
		return nil
	})
}

// restrictSelf enforces the ruleset on the calling (locked) thread, which
// is about to execve: no all-thread synchronisation needed. It sets
// no_new_privs.
func (p *preparedLandlock) restrictSelf() error {
	if p.fd < 0 {
		return nil
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("sandbox: prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := llsyscall.LandlockRestrictSelf(p.fd, p.flags); err != nil {
		return fmt.Errorf("sandbox: landlock_restrict_self (ABI %d): %w", p.abi, err)
	}
	return nil
}

func (p *preparedLandlock) close() {
	if p != nil && p.fd >= 0 {
		unix.Close(p.fd)
		p.fd = -1
	}
}

// DefaultReadOnlySystemPaths returns the system locations ordinary programs
// need to read and execute (binaries, libraries, /etc, /proc, /sys), keeping
// only those that exist on this machine. /dev is deliberately not listed:
// read access to /dev would expose raw disks to a root command; use
// DefaultReadWriteDevices for the few devices programs need.
//
// /etc is readable as a whole, including files such as /etc/shadow when the
// command runs as root.
func DefaultReadOnlySystemPaths() []string {
	return llExisting([]string{
		"/bin", "/sbin", "/usr", "/lib", "/lib32", "/lib64", "/libx32",
		"/etc", "/proc", "/sys",
		"/opt", "/nix/store", "/snap",
	})
}

// DefaultReadWriteDevices returns the devices ordinary programs open for
// reading and writing (/dev/null, /dev/zero, random sources, the
// controlling terminal and pseudo-terminals), keeping only those that exist.
// /dev/shm is not included: it is shared with the rest of the machine.
func DefaultReadWriteDevices() []string {
	return llExisting([]string{
		"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
		"/dev/tty", "/dev/pts", "/dev/ptmx",
	})
}

func llExisting(paths []string) []string {
	out := make([]string, 0, len(paths))
	for _, p := range paths {
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}
