package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// HelperName is the argv[0] under which the executor's own binary acts as
// the sandbox helper.
const HelperName = "outpost-sandbox"

// helperPolicyEnv carries the resolved policy to the helper, which removes
// it before running the command.
const helperPolicyEnv = "OUTPOST_SANDBOX_SPEC"

// Sandbox types reported in process/start results.
const (
	TypeLinux = "linuxSeccomp" // run by the helper
	TypeNone  = "none"         // full access: run as is
)

// ErrCannotEnforce prefixes every refusal to run a sandboxed command.
var ErrCannotEnforce = errors.New("sandbox cannot be enforced on this executor")

// Request is a command the executor is about to run, with the policy the
// client asked for.
type Request struct {
	Argv   []string
	Arg0   string
	Dir    string // native, absolute
	Env    []string
	Policy Policy
	// ProjectRoots are the workspace roots (default [Dir]).
	ProjectRoots []string
	// Translate maps client paths in the policy to native ones.
	Translate func(string) (string, error)
	// Limits are the resource limits of the sandboxed command.
	Limits Limits
	// User is the host id the command runs as (root inside its user
	// namespace); nil: the executor's own ids. Required, and never uid 0,
	// when the executor runs as root (see DefaultUser).
	User *User
	// Hidden are the executor's secrets: access none in every policy.
	Hidden []string
	// ExactProjectRoots: ProjectRoots are what the client named, even
	// none (codex's workspaceRoots); otherwise none means [Dir].
	ExactProjectRoots bool
	// TempDir is what :tmpdir means for this command (its $TMPDIR);
	// default os.TempDir().
	TempDir string
}

// Limits are per-command resource limits (0 = leave as inherited). Core
// dumps are always off in the sandbox.
type Limits struct {
	OpenFiles uint64 // RLIMIT_NOFILE
	FileSize  uint64 // RLIMIT_FSIZE, bytes
	Processes uint64 // RLIMIT_NPROC (per user!)
}

// DefaultLimits are the limits unless the executor is configured
// otherwise.
func DefaultLimits() Limits {
	return Limits{OpenFiles: 4096, FileSize: 16 << 30, Processes: 0}
}

// Env markers set for sandboxed commands.
const (
	EnvSandbox                = "OUTPOST_SANDBOX"
	EnvSandboxNetworkOff      = "OUTPOST_SANDBOX_NETWORK_DISABLED"
	EnvCodexSandboxNetworkOff = "CODEX_SANDBOX_NETWORK_DISABLED"
)

// Prepared is a request rewritten to run under the helper.
type Prepared struct {
	Argv        []string // helper binary, then "--", then the command
	Arg0        string   // HelperName
	Path        string   // the helper binary
	Dir         string   // where the helper starts; it enters the command's cwd itself
	Env         []string
	SandboxType string
	Resolved    Resolved
	// UserNamespace: the helper runs in its own user, mount and PID
	// namespace (Setup's Launch says how).
	UserNamespace bool
	// User is the host id the command runs as; nil: the executor's.
	User *User

	sp     spec
	user   *User
	mounts []mountSpec // workspaces and writable roots, for setup
	absent []string    // protected names to hold with placeholders
}

// Launch is what a sandboxed start needs at the fork: the helper's spec
// (an environment entry), the descriptors it inherits as fds 3, 4, …, and
// the namespaces it is cloned into. Hold makes the placeholders of absent
// protected names; call it before the helper starts (or, for a pooled
// helper, before PooledHelper.Proceed). Files are the caller's to close
// once the child has started; Release, after the command has exited.
type Launch struct {
	// User is the host id the command runs as (nil: the executor's).
	User    *User
	Files   []*os.File
	Release func()
	apply   func(*syscall.SysProcAttr)
	hold    func()
	// sp is the helper's spec and namespaced says the helper gets its
	// own namespaces: what a pooled helper needs (PooledHelper.Hand).
	sp         spec
	namespaced bool
}

// Env is the environment entry that carries the spec to a helper started
// for the command (a pooled helper gets it in its request instead).
func (l Launch) Env() (string, error) {
	data, err := json.Marshal(l.sp)
	if err != nil {
		return "", err
	}
	return helperPolicyEnv + "=" + string(data), nil
}

// EnvFor is Env carrying cmdEnv, the command's environment: the helper
// is started with this one entry as its whole environment and hands
// cmdEnv to the command alone.
func (l Launch) EnvFor(cmdEnv []string) (string, error) {
	sp := l.sp
	sp.CommandEnv = append([]string{}, cmdEnv...)
	data, err := json.Marshal(sp)
	if err != nil {
		return "", err
	}
	return helperPolicyEnv + "=" + string(data), nil
}

// Hold makes the placeholders the helper protects (see Launch).
func (l Launch) Hold() {
	if l.hold != nil {
		l.hold()
	}
}

// Poolable reports whether a pre-started helper can run this start (see
// PooledHelper): the helper gets namespaces of its own.
func (l Launch) Poolable() bool { return l.namespaced }

// Apply sets the namespaces and id mappings the helper is cloned with.
func (l Launch) Apply(attr *syscall.SysProcAttr) {
	if l.apply != nil {
		l.apply(attr)
	}
}

// Setup makes what the start needs right now: ID-mapped workspace mounts
// and placeholders for absent protected names. A Prepared that needs no
// helper (full access) sets up nothing.
func (p Prepared) Setup() (Launch, error) {
	if p.SandboxType != TypeLinux {
		return Launch{Release: func() {}}, nil
	}
	return p.setup()
}

// spec is what the helper receives.
type spec struct {
	// CommandEnv is the command's environment, applied at its execve
	// only: the helper itself runs with none but its spec, so no
	// LD_PRELOAD, LD_AUDIT or GCONV_PATH of the command's acts in the
	// helper before the sandbox is in force.
	CommandEnv []string `json:"env,omitempty"`
	Network    bool     `json:"network"`
	ReadOnly   []string `json:"readOnly"`
	ReadWrite  []string `json:"readWrite"`
	None       []string `json:"none"`
	Protected  []string `json:"protected"`
	FullWrite  bool     `json:"fullWrite"`
	Arg0       string   `json:"arg0,omitempty"`
	Limits     Limits   `json:"limits"`
	// MountNamespace says the executor started the helper in its own
	// user, mount and PID namespace; the helper is then the namespace's
	// init.
	MountNamespace bool `json:"mountNamespace,omitempty"`
	// Dir is the command's working directory, entered after the mounts.
	Dir string `json:"dir"`
	// Mounts are the workspaces and writable roots to put in place.
	Mounts []mountSpec `json:"mounts,omitempty"`
	// DenySetID refuses set-user/group-ID modes (the command's files land
	// with another owner's ids on disk).
	DenySetID bool `json:"denySetID,omitempty"`
}

// mountSpec is one mount the helper puts in place.
type mountSpec struct {
	Path string `json:"path"`
	// FD is the helper's descriptor of a detached mount to move onto Path;
	// 0: the helper clones Path onto itself.
	FD       int  `json:"fd,omitempty"`
	ReadOnly bool `json:"readOnly,omitempty"`
	// between: a directory between a writable root and something below it,
	// pinned as a mount point; never ID-mapped.
	between bool
}

// User is the host id sandboxed commands run as when the executor is root.
type User struct{ UID, GID int }

func (u User) String() string { return fmt.Sprintf("%d:%d", u.UID, u.GID) }

// SameUser reports whether a and b (nil: the executor's own ids) are the
// same host ids.
func SameUser(a, b *User) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// copyUser is a copy of u that the caller's later changes do not reach.
func copyUser(u *User) *User {
	if u == nil {
		return nil
	}
	c := *u
	return &c
}

// DefaultUser is the id a root executor gives sandboxed commands: the
// conventional unprivileged nobody:nogroup.
var DefaultUser = User{UID: 65534, GID: 65534}

// ErrRootSandboxUser refuses to run sandboxed commands as host root.
var ErrRootSandboxUser = errors.New("sandbox: sandboxed commands must not run as uid 0")

var (
	selfOnce sync.Once
	selfPath string
	selfErr  error
)

// self is this executable, re-executed as the helper. On Linux it is
// /proc/self/exe, which a child (between fork and exec) resolves to the
// very file the executor runs: replacing the binary on disk during an
// upgrade cannot hand a running executor's policy to a helper of another
// build, which might read it differently.
func self() (string, error) {
	selfOnce.Do(func() {
		selfPath, selfErr = os.Executable()
		if selfErr == nil {
			selfPath, selfErr = filepath.EvalSymlinks(selfPath)
		}
		if selfErr == nil && runtime.GOOS == "linux" {
			if _, err := os.Stat("/proc/self/exe"); err == nil {
				selfPath = "/proc/self/exe"
			}
		}
	})
	return selfPath, selfErr
}

// SetHelperBinary overrides the helper binary (tests build one). It is
// executed through a descriptor, as /proc/self/exe is: the command's
// unprivileged user need not be able to reach the file's directory.
func SetHelperBinary(path string) {
	selfOnce.Do(func() {})
	selfPath, selfErr = path, nil
	if strings.HasPrefix(path, "/proc/") {
		return
	}
	if f, err := os.Open(path); err == nil {
		if helperFile != nil {
			helperFile.Close()
		}
		helperFile = f
		selfPath = fmt.Sprintf("/proc/self/fd/%d", f.Fd())
	}
}

// Prepare rewrites req to run under the sandbox helper, or refuses with
// ErrCannotEnforce when this machine cannot enforce the policy. It never
// returns a request that would run unsandboxed.
func Prepare(req Request, caps Capabilities) (Prepared, error) {
	if len(req.Argv) == 0 {
		return Prepared{}, errors.New("argv must not be empty")
	}
	roots := req.ProjectRoots
	if len(roots) == 0 && !req.ExactProjectRoots {
		roots = []string{req.Dir}
	}
	res, err := req.Policy.Resolve(Env{Cwd: req.Dir, ProjectRoots: roots, TempDir: req.TempDir, Translate: req.Translate, Hidden: req.Hidden,
		SharedTempUnscanned: req.User != nil, NoProjectRootFallback: req.ExactProjectRoots})
	if err != nil {
		return Prepared{}, err
	}
	if res.FullWrite() && res.Network {
		// Full access: nothing to enforce, so nothing to wrap.
		return Prepared{Argv: req.Argv, Arg0: req.Arg0, Dir: req.Dir, Env: req.Env, SandboxType: TypeNone, Resolved: res}, nil
	}
	sp := spec{Network: res.Network, FullWrite: res.FullWrite(), Arg0: req.Arg0, Limits: req.Limits, Dir: req.Dir}
	var writable []string
	for _, e := range res.Entries {
		switch e.Access {
		case AccessRead:
			sp.ReadOnly = append(sp.ReadOnly, e.Path)
		case AccessWrite:
			sp.ReadWrite = append(sp.ReadWrite, e.Path)
			writable = append(writable, e.Path)
		case AccessNone:
			sp.None = append(sp.None, e.Path)
		}
	}
	// Only what lies in a writable root needs a read-only mount on top;
	// elsewhere Landlock already denies writes.
	for _, p := range res.Protected {
		if inAnyRoot(writable, p) {
			sp.Protected = append(sp.Protected, p)
		}
	}
	if reason := caps.cannotEnforce(sp); reason != "" {
		return Prepared{}, fmt.Errorf("%w: %s", ErrCannotEnforce, reason)
	}
	user := req.User
	if user == nil && caps.Euid == 0 {
		return Prepared{}, fmt.Errorf("%w: the executor runs as root and no unprivileged user is set for sandboxed commands", ErrCannotEnforce)
	}
	if user != nil && user.UID == 0 {
		return Prepared{}, fmt.Errorf("%w: %v", ErrCannotEnforce, ErrRootSandboxUser)
	}
	if user != nil && !caps.MountNamespaces {
		return Prepared{}, fmt.Errorf("%w: the executor runs as root, and sandboxed commands run as uid %d only inside a user namespace, which this machine does not allow", ErrCannotEnforce, user.UID)
	}
	sp.MountNamespace = caps.MountNamespaces
	if len(sp.None) > 0 && !sp.MountNamespace && !sp.FullWrite {
		return Prepared{}, fmt.Errorf("%w: paths with access none need user namespaces, which this machine does not allow", ErrCannotEnforce)
	}
	sp.DenySetID = user != nil
	bin, err := self()
	if err != nil {
		return Prepared{}, fmt.Errorf("%w: cannot locate the helper binary: %v", ErrCannotEnforce, err)
	}
	env := append(withoutPolicyEnv(req.Env), EnvSandbox+"="+TypeLinux)
	if !sp.Network {
		env = append(env, EnvSandboxNetworkOff+"=1", EnvCodexSandboxNetworkOff+"=1")
	}
	prep := Prepared{
		Argv:          append([]string{HelperName, "--"}, req.Argv...),
		Arg0:          HelperName,
		Path:          bin,
		Dir:           "/",
		Env:           env,
		SandboxType:   TypeLinux,
		Resolved:      res,
		UserNamespace: sp.MountNamespace,
		User:          user,
		sp:            sp,
		user:          user,
	}
	if !sp.MountNamespace {
		prep.Dir = req.Dir
		return prep, nil
	}
	prep.absent = res.Absent
	// The command's user reaches its workspaces through mounts of its own:
	// writable roots always (they become mount points), and — when it is
	// not the executor's user — the read-only workspaces too.
	mounted := map[string]bool{}
	for _, w := range writable {
		// "/" itself is no workspace: a full-write policy lets the
		// command write what its user may, nothing more.
		if w != "/" && !mounted[w] && exists(w) {
			mounted[w] = true
			prep.mounts = append(prep.mounts, mountSpec{Path: w})
		}
	}
	if user != nil {
		for _, w := range res.Workspaces {
			if !mounted[w] && !inAnyRoot(writable, w) && exists(w) && res.Access(w) != AccessNone {
				mounted[w] = true
				prep.mounts = append(prep.mounts, mountSpec{Path: w, ReadOnly: true})
			}
		}
	}
	// A workspace inside another writable root (a checkout under /tmp),
	// or a protected path below its root (sub/vendor/.git), could still be
	// moved away with a directory above it and rebuilt: every directory
	// between the two becomes a mount point as well — bound as it is,
	// never ID-mapped (that would hand the command a directory it was not
	// given, such as a 0700 one of root's above a checkout).
	below := append([]string(nil), sp.Protected...)
	for _, m := range prep.mounts {
		below = append(below, m.Path)
	}
	for _, p := range below {
		for a := filepath.Dir(p); a != "/" && a != "."; a = filepath.Dir(a) {
			if mounted[a] || !inAnyRoot(writable, a) || slices.Contains(writable, a) {
				continue
			}
			if len(prep.mounts) >= MaxProtectedPaths {
				return Prepared{}, fmt.Errorf("%w: more than %d directories to pin below the writable roots", ErrTooManyToProtect, MaxProtectedPaths)
			}
			mounted[a] = true
			prep.mounts = append(prep.mounts, mountSpec{Path: a, between: true})
		}
	}
	return prep, nil
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

func inAnyRoot(roots []string, p string) bool {
	for _, r := range roots {
		if within(r, p) {
			return true
		}
	}
	return false
}

func withoutPolicyEnv(env []string) []string {
	out := env[:0:0]
	for _, kv := range env {
		if !strings.HasPrefix(kv, helperPolicyEnv+"=") {
			out = append(out, kv)
		}
	}
	return out
}

// Capabilities is what this machine can enforce.
type Capabilities struct {
	OS              string
	Kernel          string
	LandlockABI     int
	Seccomp         bool
	MountNamespaces bool // user + mount + PID namespaces for the helper
	// Euid is the executor's effective uid: as root, sandboxed commands
	// run as an unprivileged user (Request.User).
	Euid int
	// IDMappedMounts: workspaces can be ID-mapped for that user.
	IDMappedMounts bool
}

// Probe inspects the machine once.
func Probe() Capabilities {
	probeOnce.Do(func() {
		probed = Capabilities{OS: runtime.GOOS, Kernel: kernelRelease(), LandlockABI: LandlockABI(), Seccomp: SeccompSupported(), MountNamespaces: canUnshareMount(), Euid: os.Geteuid()}
		probed.IDMappedMounts = probed.MountNamespaces && canIDMap()
	})
	return probed
}

var (
	probeOnce sync.Once
	probed    Capabilities
)

// cannotEnforce returns why sp cannot be enforced here, or "".
func (c Capabilities) cannotEnforce(sp spec) string {
	if c.OS != "linux" {
		return "sandboxing needs Linux (this executor runs on " + c.OS + ")"
	}
	if !c.Seccomp {
		return "the kernel does not accept seccomp filters"
	}
	if !sp.FullWrite && c.LandlockABI == 0 {
		return "Landlock is not available on this kernel, so filesystem limits cannot be enforced"
	}
	if !sp.Network && c.LandlockABI < 4 {
		// Without Landlock's network rules, seccomp alone still denies
		// every non-Unix socket; that is enough.
		return ""
	}
	return ""
}

// Check reports whether policy can be enforced here (nil if it can).
func (c Capabilities) Check(policy Policy) error {
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	var user *User
	if c.Euid == 0 {
		user = &DefaultUser
	}
	_, err = Prepare(Request{Argv: []string{"/bin/true"}, Dir: dir, Policy: policy, User: user}, c)
	return err
}

func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Report describes the capabilities for people (outpost executor doctor).
func (c Capabilities) Report() []string {
	yes := func(b bool) string {
		if b {
			return "yes"
		}
		return "no"
	}
	lines := []string{
		"os: " + c.OS + " " + c.Kernel,
		fmt.Sprintf("landlock: ABI %d (%s)", c.LandlockABI, landlockMeaning(c.LandlockABI)),
		"seccomp filters: " + yes(c.Seccomp),
		"user+mount namespaces: " + yes(c.MountNamespaces),
	}
	enforced := []string{}
	notEnforced := []string{}
	if c.LandlockABI > 0 {
		enforced = append(enforced, "filesystem read/write limits (Landlock)")
	} else {
		notEnforced = append(notEnforced, "filesystem limits: sandboxed starts are refused")
	}
	if c.Seccomp {
		enforced = append(enforced, "network off: only AF_UNIX sockets (seccomp)", "ptrace, process_vm_*, io_uring, TIOCSTI denied (seccomp)")
	}
	if c.LandlockABI >= 4 {
		enforced = append(enforced, "network off: TCP bind/connect denied (Landlock)")
	}
	if c.MountNamespaces && ProcMasked() {
		enforced = append(enforced, "protected names (.git, .outpost, .agents, .codex) read-only at any depth (mount namespace)",
			"a PID namespace per command (it can signal nothing outside)")
		notEnforced = append(notEnforced, "a /proc of the command's own: this container masks /proc paths, so commands see the container's /proc")
	} else if c.MountNamespaces {
		enforced = append(enforced, "protected names (.git, .outpost, .agents, .codex) read-only at any depth (mount namespace)",
			"a PID namespace per command with its own /proc (other processes are invisible)")
	} else {
		notEnforced = append(notEnforced, "protected sub-paths inside writable roots are NOT enforced (no user namespaces)",
			"no PID namespace: commands can see other processes of the same user")
	}
	switch {
	case c.Euid != 0:
		enforced = append(enforced, fmt.Sprintf("sandboxed commands run as this executor's uid %d (root only inside their user namespace)", c.Euid))
	case c.MountNamespaces && c.IDMappedMounts:
		enforced = append(enforced, fmt.Sprintf("sandboxed commands never run as host root: as uid %s (--sandbox-user; root only inside their user namespace), workspaces reach them through ID-mapped mounts", DefaultUser))
	case c.MountNamespaces:
		enforced = append(enforced, fmt.Sprintf("sandboxed commands never run as host root: as uid %s (--sandbox-user)", DefaultUser))
		notEnforced = append(notEnforced, "ID-mapped mounts (Linux 5.12+): workspaces that uid does not own cannot be written; such starts are refused")
	default:
		notEnforced = append(notEnforced, "the executor runs as root without user namespaces: sandboxed starts are refused (they would run as root)")
	}
	for _, e := range enforced {
		lines = append(lines, "enforced: "+e)
	}
	for _, n := range notEnforced {
		lines = append(lines, "not enforced: "+n)
	}
	return lines
}

func landlockMeaning(abi int) string {
	switch {
	case abi == 0:
		return "unavailable"
	case abi < 3:
		return "filesystem; no truncate or network rules"
	case abi < 4:
		return "filesystem incl. truncate; no network rules"
	default:
		return "filesystem and TCP bind/connect; MPTCP and Unix socket files are left to seccomp and file permissions"
	}
}
