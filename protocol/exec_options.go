package protocol

// The optional process/start params codex 0.171 added: attribution
// (metadata), a shell snapshot to restore (shellSnapshot) and an
// executor-local network proxy to launch (networkProxy). Their shapes are
// codex's, field for field; codex's server refuses a value of the wrong
// shape with -32602, and so does outpost (execparams_json.go checks the
// JSON form as codex's decoder does). What outpost does with a well-formed
// one is the executor's business (executor.Session.validateStart): it
// launches no proxy and restores no snapshot, so it refuses those.

// ExecMetadata is codex's tool attribution for a command: telemetry, not
// authorisation. ThreadID is a UUID (codex's thread id), ToolCallID free
// text.
type ExecMetadata struct {
	ThreadID   *string `json:"threadId,omitempty" msgpack:"threadId,omitempty"`
	ToolCallID *string `json:"toolCallId,omitempty" msgpack:"toolCallId,omitempty"`
}

// ShellSnapshotRequest asks the executor to restore the shell state it
// captured for ScopeID (environment, functions, options of Shell's login
// profile) before running the command.
type ShellSnapshotRequest struct {
	ScopeID string `json:"scopeId" msgpack:"scopeId"`
	Shell   Shell  `json:"shell" msgpack:"shell"`
}

// NetworkProxyLaunch is codex's RemoteNetworkProxyLaunchConfig: start a
// managed HTTP/SOCKS5 proxy on the executor for this one command and
// route the command's network through it.
type NetworkProxyLaunch struct {
	Proxy         NetworkProxyConfig         `json:"proxy" msgpack:"proxy"`
	AuditMetadata *NetworkProxyAuditMetadata `json:"auditMetadata,omitempty" msgpack:"auditMetadata,omitempty"`
	EnvironmentID *string                    `json:"environmentId,omitempty" msgpack:"environmentId,omitempty"`
	ExecutionID   *string                    `json:"executionId,omitempty" msgpack:"executionId,omitempty"`
	// PolicyDecisionTimeoutMs is the client's budget for answering a
	// network policy question; codex refuses 0.
	PolicyDecisionTimeoutMs *uint64 `json:"policyDecisionTimeoutMs,omitempty" msgpack:"policyDecisionTimeoutMs,omitempty"`
}

// NetworkProxyConfig is codex's RemoteNetworkProxyConfig. Every field but
// Domains and UnixSockets is required on the wire.
type NetworkProxyConfig struct {
	Enabled                        bool `json:"enabled" msgpack:"enabled"`
	EnableSocks5                   bool `json:"enableSocks5" msgpack:"enableSocks5"`
	EnableSocks5UDP                bool `json:"enableSocks5Udp" msgpack:"enableSocks5Udp"`
	AllowUpstreamProxy             bool `json:"allowUpstreamProxy" msgpack:"allowUpstreamProxy"`
	DangerouslyAllowAllUnixSockets bool `json:"dangerouslyAllowAllUnixSockets" msgpack:"dangerouslyAllowAllUnixSockets"`
	Mode                           any  `json:"mode" msgpack:"mode"`                                   // "limited" or "full" (or {"full":null})
	Domains                        any  `json:"domains,omitempty" msgpack:"domains,omitempty"`         // domain -> "none", "allow" or "deny"
	UnixSockets                    any  `json:"unixSockets,omitempty" msgpack:"unixSockets,omitempty"` // path -> "allow" or "deny"
	AllowLocalBinding              bool `json:"allowLocalBinding" msgpack:"allowLocalBinding"`
}

// NetworkProxyAuditMetadata is what codex's proxy records with each
// decision.
type NetworkProxyAuditMetadata struct {
	ConversationID *string `json:"conversationId,omitempty" msgpack:"conversationId,omitempty"`
	AppVersion     *string `json:"appVersion,omitempty" msgpack:"appVersion,omitempty"`
	UserAccountID  *string `json:"userAccountId,omitempty" msgpack:"userAccountId,omitempty"`
	AuthMode       *string `json:"authMode,omitempty" msgpack:"authMode,omitempty"`
	Originator     *string `json:"originator,omitempty" msgpack:"originator,omitempty"`
	UserEmail      *string `json:"userEmail,omitempty" msgpack:"userEmail,omitempty"`
	TerminalType   *string `json:"terminalType,omitempty" msgpack:"terminalType,omitempty"`
	Model          *string `json:"model,omitempty" msgpack:"model,omitempty"`
	Slug           *string `json:"slug,omitempty" msgpack:"slug,omitempty"`
}
