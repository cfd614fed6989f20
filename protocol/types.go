package protocol

import "strings"

// InitializeParams opens or resumes a session.
type InitializeParams struct {
	ClientName string `json:"clientName" msgpack:"clientName"`
	// ResumeSessionID re-attaches a detached session; its processes kept
	// running while it was detached and their retained output can be read.
	ResumeSessionID *string `json:"resumeSessionId,omitempty" msgpack:"resumeSessionId,omitempty"`
	// TraceParent and TraceState are W3C trace context (outpost
	// addition): the executor's spans join the caller's trace. They travel
	// inside the encrypted channel, so a relay never sees them; codex
	// ignores them.
	TraceParent string `json:"traceparent,omitempty" msgpack:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty" msgpack:"tracestate,omitempty"`
	// ProtocolVersion is the outpost protocol version the client speaks
	// (outpost addition; codex sends none, which means codex's protocol).
	// An executor that does not speak it refuses with kind unsupported.
	ProtocolVersion int `json:"protocolVersion,omitempty" msgpack:"protocolVersion,omitempty"`
}

// InitializeResult names the session, new or resumed.
type InitializeResult struct {
	SessionID string `json:"sessionId" msgpack:"sessionId"`
	// EnvironmentInfo is what environment/info answers (codex 0.171):
	// a client that has it need not ask.
	EnvironmentInfo *EnvironmentInfo `json:"environmentInfo,omitempty" msgpack:"environmentInfo,omitempty"`
	// ProtocolVersion is the executor's (outpost addition), sent to a
	// client that sent one.
	ProtocolVersion int `json:"protocolVersion,omitempty" msgpack:"protocolVersion,omitempty"`
}

// EnvPolicyInherit selects which of the executor's own variables a child
// starts from when an EnvPolicy is given.
type EnvPolicyInherit string

const (
	InheritAll  EnvPolicyInherit = "all"
	InheritCore EnvPolicyInherit = "core"
	InheritNone EnvPolicyInherit = "none"
)

// EnvPolicy builds a child's environment from the executor's own: start
// from Inherit, drop names matching *KEY*, *SECRET*, *TOKEN* (unless
// IgnoreDefaultExcludes), drop Exclude, add Set, keep only IncludeOnly when
// it is non-empty. Patterns are case-insensitive globs (* and ?). The
// request's Env is laid over the result.
type EnvPolicy struct {
	Inherit               EnvPolicyInherit  `json:"inherit" msgpack:"inherit"`
	IgnoreDefaultExcludes bool              `json:"ignoreDefaultExcludes" msgpack:"ignoreDefaultExcludes"`
	Exclude               []string          `json:"exclude" msgpack:"exclude"`
	Set                   map[string]string `json:"set" msgpack:"set"`
	IncludeOnly           []string          `json:"includeOnly" msgpack:"includeOnly"`
}

// ManagedNetwork is codex's managed-network description. outpost does not
// implement managed networking; a request that asks for it fails closed.
type ManagedNetwork struct {
	LoopbackPorts     []uint16 `json:"loopbackPorts" msgpack:"loopbackPorts"`
	AllowLocalBinding bool     `json:"allowLocalBinding" msgpack:"allowLocalBinding"`
}

// ExecParams are the params of process/start.
type ExecParams struct {
	// ProcessID is chosen by the client and unique within the session.
	ProcessID string   `json:"processId" msgpack:"processId"`
	Argv      []string `json:"argv" msgpack:"argv"`
	// Cwd is a file: URI or an absolute path on the executor. Empty means
	// the executor's own working directory.
	Cwd       string     `json:"cwd" msgpack:"cwd"`
	EnvPolicy *EnvPolicy `json:"envPolicy,omitempty" msgpack:"envPolicy,omitempty"`
	// Env is the child's exact environment when EnvPolicy is nil, and an
	// overlay on the policy's result otherwise.
	Env map[string]string `json:"env" msgpack:"env"`
	// Tty runs the child on a pseudo-terminal (24x80 unless Rows/Cols say
	// otherwise); its output is one stream labelled "pty".
	Tty bool `json:"tty" msgpack:"tty"`
	// PipeStdin keeps a non-tty child's stdin writable. Without it (and
	// without Tty) stdin is /dev/null and writes answer stdinClosed.
	PipeStdin bool `json:"pipeStdin,omitempty" msgpack:"pipeStdin,omitempty"`
	// Arg0 overrides the argv[0] the child sees.
	Arg0 *string `json:"arg0,omitempty" msgpack:"arg0,omitempty"`
	// Sandbox is the portable sandbox intent. An executor that cannot
	// enforce it refuses the start; it never runs the command unsandboxed.
	Sandbox               any             `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	EnforceManagedNetwork bool            `json:"enforceManagedNetwork,omitempty" msgpack:"enforceManagedNetwork,omitempty"`
	ManagedNetwork        *ManagedNetwork `json:"managedNetwork,omitempty" msgpack:"managedNetwork,omitempty"`
	// Metadata, ShellSnapshot and NetworkProxy are codex 0.171's options
	// (exec_options.go). The executor logs Metadata and refuses the
	// other two: it restores no snapshot and launches no proxy.
	Metadata      *ExecMetadata         `json:"metadata,omitempty" msgpack:"metadata,omitempty"`
	ShellSnapshot *ShellSnapshotRequest `json:"shellSnapshot,omitempty" msgpack:"shellSnapshot,omitempty"`
	NetworkProxy  *NetworkProxyLaunch   `json:"networkProxy,omitempty" msgpack:"networkProxy,omitempty"`
	// Rows and Cols size the PTY at start (outpost addition; 0 = default).
	Rows uint16 `json:"rows,omitempty" msgpack:"rows,omitempty"`
	Cols uint16 `json:"cols,omitempty" msgpack:"cols,omitempty"`
	// TraceParent and TraceState: W3C trace context, as in InitializeParams.
	TraceParent string `json:"traceparent,omitempty" msgpack:"traceparent,omitempty"`
	TraceState  string `json:"tracestate,omitempty" msgpack:"tracestate,omitempty"`
}

// StartResult is the result of process/start.
type StartResult struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	// SandboxType is codex 0.171's name for how the command runs: "none"
	// (as is) or "linuxSeccomp" (under the sandbox helper). Always sent,
	// as codex 0.171 does (0.145 sent none).
	SandboxType string `json:"sandboxType,omitempty" msgpack:"sandboxType,omitempty"`
	// Pid is the child's process id on the executor, which is also its
	// process group (outpost addition).
	Pid int `json:"pid,omitempty" msgpack:"pid,omitempty"`
}

// Stream labels an output chunk.
type Stream string

const (
	StreamStdout Stream = "stdout"
	StreamStderr Stream = "stderr"
	StreamPty    Stream = "pty"
)

// ReadParams are the params of process/read, a long poll over the
// process's retained output.
type ReadParams struct {
	ProcessID string  `json:"processId" msgpack:"processId"`
	AfterSeq  *uint64 `json:"afterSeq,omitempty" msgpack:"afterSeq,omitempty"`
	MaxBytes  *uint64 `json:"maxBytes,omitempty" msgpack:"maxBytes,omitempty"`
	WaitMs    *uint64 `json:"waitMs,omitempty" msgpack:"waitMs,omitempty"`
}

// OutputChunk is one read from one of the child's streams. Chunk is
// standard base64 with padding in JSON and raw bytes in msgpack.
type OutputChunk struct {
	Seq    uint64 `json:"seq" msgpack:"seq"`
	Stream Stream `json:"stream" msgpack:"stream"`
	Chunk  []byte `json:"chunk" msgpack:"chunk"`
}

// Gap reports sequence numbers FromSeq..ToSeq (inclusive) that the caller
// asked for but the executor no longer retains: their output is lost to
// this reader. Codex omits them silently; outpost says so.
type Gap struct {
	FromSeq uint64 `json:"fromSeq" msgpack:"fromSeq"`
	ToSeq   uint64 `json:"toSeq" msgpack:"toSeq"`
}

// ReadResult is the result of process/read.
type ReadResult struct {
	Chunks        []OutputChunk `json:"chunks" msgpack:"chunks"`
	NextSeq       uint64        `json:"nextSeq" msgpack:"nextSeq"`
	Exited        bool          `json:"exited" msgpack:"exited"`
	ExitCode      *int32        `json:"exitCode" msgpack:"exitCode"`
	Closed        bool          `json:"closed" msgpack:"closed"`
	Failure       *string       `json:"failure" msgpack:"failure"`
	SandboxDenied bool          `json:"sandboxDenied" msgpack:"sandboxDenied"`
	Gap           *Gap          `json:"gap,omitempty" msgpack:"gap,omitempty"`
	// ExitSeq and CloseSeq place the exit and close events among the
	// chunks (outpost addition; 0 until they happen), so a reader that
	// catches up through process/read can rebuild the exact event order.
	ExitSeq  uint64 `json:"exitSeq,omitempty" msgpack:"exitSeq,omitempty"`
	CloseSeq uint64 `json:"closeSeq,omitempty" msgpack:"closeSeq,omitempty"`
	// Limit is as in ExitedNotification (outpost addition).
	Limit string `json:"limit,omitempty" msgpack:"limit,omitempty"`
	// Signal is as in ExitedNotification: the signal that killed the
	// process, omitted while it runs and when it exited (outpost addition).
	Signal int32 `json:"signal,omitempty" msgpack:"signal,omitempty"`
}

// WriteParams are the params of process/write.
type WriteParams struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	Chunk     []byte `json:"chunk" msgpack:"chunk"`
	// WriteID de-duplicates retries: a WriteID already accepted for this
	// process answers accepted and writes nothing. Older codex peers send
	// none; then there is no de-duplication.
	WriteID *string `json:"writeId,omitempty" msgpack:"writeId,omitempty"`
	// CloseStdin closes the child's stdin after Chunk (outpost addition).
	// On a PTY it sends the terminal's EOF character (^D).
	CloseStdin bool `json:"closeStdin,omitempty" msgpack:"closeStdin,omitempty"`
}

// WriteStatus is the outcome of process/write.
type WriteStatus string

const (
	WriteAccepted       WriteStatus = "accepted"
	WriteUnknownProcess WriteStatus = "unknownProcess"
	WriteStdinClosed    WriteStatus = "stdinClosed"
	WriteStarting       WriteStatus = "starting"
)

// WriteResult is the result of process/write.
type WriteResult struct {
	Status WriteStatus `json:"status" msgpack:"status"`
}

// Signal names a signal for process/signal. codex knows only interrupt.
type Signal string

const (
	SignalInterrupt Signal = "interrupt" // SIGINT
	SignalTerminate Signal = "terminate" // SIGTERM
	SignalHangup    Signal = "hangup"    // SIGHUP
	SignalKill      Signal = "kill"      // SIGKILL
	SignalQuit      Signal = "quit"      // SIGQUIT
	SignalUser1     Signal = "user1"     // SIGUSR1
	SignalUser2     Signal = "user2"     // SIGUSR2
)

// Signals lists every signal process/signal accepts.
var Signals = []Signal{SignalInterrupt, SignalTerminate, SignalHangup, SignalKill, SignalQuit, SignalUser1, SignalUser2}

// ParseSignal accepts a Signal name, or a conventional name such as "INT",
// "SIGTERM" or "usr1", case-insensitively.
func ParseSignal(s string) (Signal, bool) {
	switch strings.TrimPrefix(strings.ToUpper(s), "SIG") {
	case "INTERRUPT", "INT":
		return SignalInterrupt, true
	case "TERMINATE", "TERM":
		return SignalTerminate, true
	case "HANGUP", "HUP":
		return SignalHangup, true
	case "KILL":
		return SignalKill, true
	case "QUIT":
		return SignalQuit, true
	case "USER1", "USR1":
		return SignalUser1, true
	case "USER2", "USR2":
		return SignalUser2, true
	}
	return "", false
}

// SignalParams are the params of process/signal.
type SignalParams struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	Signal    string `json:"signal" msgpack:"signal"`
}

// TerminateParams are the params of process/terminate.
type TerminateParams struct {
	ProcessID string `json:"processId" msgpack:"processId"`
}

// TerminateResult says whether the process was still running (or
// starting) when the terminate arrived.
type TerminateResult struct {
	Running bool `json:"running" msgpack:"running"`
}

// ResizeParams are the params of process/resize (outpost addition).
type ResizeParams struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	Rows      uint16 `json:"rows" msgpack:"rows"`
	Cols      uint16 `json:"cols" msgpack:"cols"`
}

// Empty is the result of methods that return nothing.
type Empty struct{}

// Shell names the executor's default shell.
type Shell struct {
	Name string `json:"name" msgpack:"name"`
	Path string `json:"path" msgpack:"path"`
}

// EnvironmentInfo is the result of environment/info, and (codex 0.171)
// InitializeResult.EnvironmentInfo. Every path is a file: URI, as codex
// sends them: codex 0.171 refuses the whole object if one is a plain
// path, and then falls back to its own login shell.
type EnvironmentInfo struct {
	Shell           Shell  `json:"shell" msgpack:"shell"`
	ExecutorVersion string `json:"executorVersion,omitempty" msgpack:"executorVersion,omitempty"`
	// ProviderID names this executor's environment provider ("outpost:"
	// and the executor's build), where codex's names its own binary's
	// digest.
	ProviderID           string   `json:"providerId,omitempty" msgpack:"providerId,omitempty"`
	Cwd                  string   `json:"cwd,omitempty" msgpack:"cwd,omitempty"` // file: URI
	UserHomeDir          string   `json:"userHomeDir,omitempty" msgpack:"userHomeDir,omitempty"`
	PlatformOS           string   `json:"platformOs,omitempty" msgpack:"platformOs,omitempty"`
	PrependPathDirs      []string `json:"prependPathDirs" msgpack:"prependPathDirs"`
	TemporaryDirectories []string `json:"temporaryDirectories" msgpack:"temporaryDirectories"`
	TempDir              string   `json:"tempDir,omitempty" msgpack:"tempDir,omitempty"`
	// Capabilities are codex's: what optional requests the server honours.
	Capabilities EnvironmentCapabilities `json:"capabilities" msgpack:"capabilities"`
}

// EnvironmentCapabilities is codex 0.171's capabilities object: each flag
// gates a family of optional requests, and codex uses only those its
// server sets. outpost sets a flag exactly when it implements what the
// flag promises (executor.Capabilities); every flag is always sent, as
// codex's server sends them.
type EnvironmentCapabilities struct {
	// NetworkProxyLaunch and its family: codex's managed network proxy
	// for a command (process/start's networkProxy). outpost has none yet.
	NetworkProxyLaunch         bool `json:"networkProxyLaunch" msgpack:"networkProxyLaunch"`
	NetworkProxyReviewDomains  bool `json:"networkProxyReviewDomains" msgpack:"networkProxyReviewDomains"`
	NetworkProxyTransparentTCP bool `json:"networkProxyTransparentTcp" msgpack:"networkProxyTransparentTcp"`
	// CredentialMasking: secrets in a command's environment are masked in
	// its output (and CredentialMaskingCustomProviders: by providers the
	// client names).
	CredentialMasking                bool `json:"credentialMasking" msgpack:"credentialMasking"`
	CredentialMaskingCustomProviders bool `json:"credentialMaskingCustomProviders" msgpack:"credentialMaskingCustomProviders"`
	// CapabilityDiscoverySandbox: capabilities/discoverV2 honours a
	// sandbox policy.
	CapabilityDiscoverySandbox bool `json:"capabilityDiscoverySandbox" msgpack:"capabilityDiscoverySandbox"`
	// FsWatchMissing: fs/watchMissing and fs/missingChanged.
	FsWatchMissing bool `json:"fsWatchMissing" msgpack:"fsWatchMissing"`
	// CapabilityDiscoveryV2: capabilities/discoverV2 (skills and plugins
	// found on the executor).
	CapabilityDiscoveryV2 bool `json:"capabilityDiscoveryV2" msgpack:"capabilityDiscoveryV2"`
	// EnvironmentConfigRead: environmentConfig/read.
	EnvironmentConfigRead bool `json:"environmentConfigRead" msgpack:"environmentConfigRead"`
	// HTTPHeaderEnvVars: http/request resolves header values from the
	// executor's environment.
	HTTPHeaderEnvVars bool `json:"httpHeaderEnvVars" msgpack:"httpHeaderEnvVars"`
	// SandboxedFileStreaming: fs/open and fs/readBlock under a sandbox
	// policy.
	SandboxedFileStreaming bool `json:"sandboxedFileStreaming" msgpack:"sandboxedFileStreaming"`
	// FileWriteStreaming: fs/open with a write mode and fs/writeBlock.
	FileWriteStreaming bool `json:"fileWriteStreaming" msgpack:"fileWriteStreaming"`
	// ShellSnapshotV2: process/start's shellSnapshot.
	ShellSnapshotV2 bool `json:"shellSnapshotV2" msgpack:"shellSnapshotV2"`
	// WindowsMxc: Windows-only; never on a Linux executor.
	WindowsMxc bool `json:"windowsMxc" msgpack:"windowsMxc"`
	// LinuxRootWritePreservesDevices and
	// LinuxApprovedRootWritePreservesRestrictions: how a root-writable
	// sandbox treats /dev and approved restrictions.
	LinuxRootWritePreservesDevices              bool `json:"linuxRootWritePreservesDevices" msgpack:"linuxRootWritePreservesDevices"`
	LinuxApprovedRootWritePreservesRestrictions bool `json:"linuxApprovedRootWritePreservesRestrictions" msgpack:"linuxApprovedRootWritePreservesRestrictions"`
}

// OutputNotification is the params of process/output.
type OutputNotification struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	Seq       uint64 `json:"seq" msgpack:"seq"`
	Stream    Stream `json:"stream" msgpack:"stream"`
	Chunk     []byte `json:"chunk" msgpack:"chunk"`
}

// ExitedNotification is the params of process/exited. ExitCode is the
// child's exit status, or 128+n when signal n killed it.
type ExitedNotification struct {
	ProcessID     string `json:"processId" msgpack:"processId"`
	Seq           uint64 `json:"seq" msgpack:"seq"`
	ExitCode      int32  `json:"exitCode" msgpack:"exitCode"`
	SandboxDenied *bool  `json:"sandboxDenied,omitempty" msgpack:"sandboxDenied,omitempty"`
	// Signal is the number of the signal that killed the process (outpost
	// addition; omitted when it exited), so 128+n from a signal and an
	// exit status of 128+n can be told apart.
	Signal int32 `json:"signal,omitempty" msgpack:"signal,omitempty"`
	// Limit names the executor's resource limit the command ran into
	// (outpost addition; omitted if none): LimitMemory when the OOM killer
	// took a process of the command, LimitPids when a failed command had
	// forks refused.
	Limit string `json:"limit,omitempty" msgpack:"limit,omitempty"`
}

// Values of ExitedNotification.Limit.
const (
	LimitMemory = "memory"
	LimitPids   = "pids"
)

// EventsStreamHeader opens a process's event stream (native transport).
type EventsStreamHeader struct {
	SessionID string `json:"sessionId" msgpack:"sessionId"`
	ProcessID string `json:"processId" msgpack:"processId"`
}

// ClosedNotification is the params of process/closed, a process's last
// event.
type ClosedNotification struct {
	ProcessID string `json:"processId" msgpack:"processId"`
	Seq       uint64 `json:"seq" msgpack:"seq"`
}
