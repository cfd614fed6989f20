package sandbox

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
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
	Dir         string
	Env         []string
	SandboxType string
	Resolved    Resolved
	// Cloneflags the helper needs (a user and mount namespace to make
	// protected sub-paths read-only), 0 if none.
	UserNamespace bool
}

// spec is what the helper receives.
type spec struct {
	Network   bool     `json:"network"`
	ReadOnly  []string `json:"readOnly"`
	ReadWrite []string `json:"readWrite"`
	None      []string `json:"none"`
	Protected []string `json:"protected"`
	FullWrite bool     `json:"fullWrite"`
	Arg0      string   `json:"arg0,omitempty"`
	Limits    Limits   `json:"limits"`
	// MountNamespace says the executor started the helper in its own
	// user, mount and PID namespace; the helper is then the namespace's
	// init.
	MountNamespace bool `json:"mountNamespace,omitempty"`
}

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

// SetHelperBinary overrides the helper binary (tests build one).
func SetHelperBinary(path string) {
	selfOnce.Do(func() {})
	selfPath, selfErr = path, nil
}

// Prepare rewrites req to run under the sandbox helper, or refuses with
// ErrCannotEnforce when this machine cannot enforce the policy. It never
// returns a request that would run unsandboxed.
func Prepare(req Request, caps Capabilities) (Prepared, error) {
	if len(req.Argv) == 0 {
		return Prepared{}, errors.New("argv must not be empty")
	}
	roots := req.ProjectRoots
	if len(roots) == 0 {
		roots = []string{req.Dir}
	}
	res, err := req.Policy.Resolve(Env{Cwd: req.Dir, ProjectRoots: roots, Translate: req.Translate})
	if err != nil {
		return Prepared{}, err
	}
	if res.FullWrite() && res.Network {
		// Full access: nothing to enforce, so nothing to wrap.
		return Prepared{Argv: req.Argv, Arg0: req.Arg0, Dir: req.Dir, Env: req.Env, SandboxType: TypeNone, Resolved: res}, nil
	}
	sp := spec{Network: res.Network, FullWrite: res.FullWrite(), Protected: res.Protected, Arg0: req.Arg0, Limits: req.Limits}
	for _, e := range res.Entries {
		switch e.Access {
		case AccessRead:
			sp.ReadOnly = append(sp.ReadOnly, e.Path)
		case AccessWrite:
			sp.ReadWrite = append(sp.ReadWrite, e.Path)
		case AccessNone:
			sp.None = append(sp.None, e.Path)
		}
	}
	if reason := caps.cannotEnforce(sp); reason != "" {
		return Prepared{}, fmt.Errorf("%w: %s", ErrCannotEnforce, reason)
	}
	sp.MountNamespace = caps.MountNamespaces
	if len(sp.None) > 0 && !sp.MountNamespace && !sp.FullWrite {
		return Prepared{}, fmt.Errorf("%w: paths with access none need user namespaces, which this machine does not allow", ErrCannotEnforce)
	}
	bin, err := self()
	if err != nil {
		return Prepared{}, fmt.Errorf("%w: cannot locate the helper binary: %v", ErrCannotEnforce, err)
	}
	data, err := json.Marshal(sp)
	if err != nil {
		return Prepared{}, err
	}
	env := append([]string{helperPolicyEnv + "=" + string(data)}, withoutPolicyEnv(req.Env)...)
	env = append(env, EnvSandbox+"="+TypeLinux)
	if !sp.Network {
		env = append(env, EnvSandboxNetworkOff+"=1", EnvCodexSandboxNetworkOff+"=1")
	}
	return Prepared{
		Argv:          append([]string{HelperName, "--"}, req.Argv...),
		Arg0:          HelperName,
		Path:          bin,
		Dir:           req.Dir,
		Env:           env,
		SandboxType:   TypeLinux,
		Resolved:      res,
		UserNamespace: sp.MountNamespace,
	}, nil
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
}

// Probe inspects the machine once.
func Probe() Capabilities {
	probeOnce.Do(func() {
		probed = Capabilities{OS: runtime.GOOS, Kernel: kernelRelease(), LandlockABI: LandlockABI(), Seccomp: SeccompSupported(), MountNamespaces: canUnshareMount()}
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
	_, err = Prepare(Request{Argv: []string{"/bin/true"}, Dir: dir, Policy: policy}, c)
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
	if c.MountNamespaces {
		enforced = append(enforced, "protected sub-paths (.git, .outpost, .agents, .codex) read-only (mount namespace)",
			"a PID namespace per command with its own /proc (other processes are invisible)")
	} else {
		notEnforced = append(notEnforced, "protected sub-paths inside writable roots are NOT enforced (no user namespaces)",
			"no PID namespace: commands can see other processes of the same user")
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
