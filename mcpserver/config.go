package mcpserver

import (
	"context"
	"fmt"
	"path"
	"slices"
	"time"

	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// Bounds of one call and of a session (see the package comment).
const (
	DefaultMaxHandles    = 16
	MaxMessageBytes      = 8 << 20
	DefaultMaxSessions   = 64
	MaxConcurrentCalls   = 32
	MaxControlCalls      = 8
	HandleOutput         = 1 << 20
	DefaultOutputBytes   = 32 << 10
	MaxOutputBytes       = 256 << 10
	DefaultReadBytes     = 256 << 10
	MaxReadBytes         = 512 << 10
	MaxWait              = 30 * time.Second
	DefaultTimeout       = 60 * time.Second
	DefaultMaxTimeout    = 30 * time.Minute
	MaxFileBytes         = 16 << 20
	SearchMaxFiles       = 20000
	SearchMaxFileBytes   = 1 << 20
	SearchMaxDepth       = 32
	SearchMaxResults     = 1000
	DefaultSearchResults = 100
	progressMessageBytes = 8 << 10
	maxArgvBytes         = 256 << 10
	maxStdinBytes        = 4 << 20
	maxEnvEntries        = 256
	maxExecutorsInConfig = 64
	dialTimeout          = 30 * time.Second
	terminateTimeout     = 10 * time.Second
)

// Executor is one executor the server may reach.
type Executor struct {
	// ID names it in tool calls ("executor") and the audit log.
	ID string
	// Dial connects to it. The server dials on first use and keeps the
	// connection (a client.Remote resumes by itself); it dials again once
	// a connection has been given up.
	Dial func(ctx context.Context) (client.Environment, error)
}

// Config configures a Server.
type Config struct {
	// Executors are those the tools may name; the first is the default.
	Executors []Executor
	// List, when set, lists the executors the relay knows for this
	// server's token (the executors tool marks which are online); nil
	// reports each configured executor as online when it can be reached.
	List func(ctx context.Context) ([]protocol.RelayExecutor, error)
	// Workspace is the directory (absolute, on the executor) relative
	// paths are resolved in and workspace-write may write. "" means the
	// executor's default working directory.
	Workspace string
	// DefaultSandbox is the mode of a run that names none (default
	// workspace-write).
	DefaultSandbox string
	// AllowedSandboxes are the modes a model may ask for (default
	// read-only and workspace-write); DefaultSandbox must be one of them.
	AllowedSandboxes []string
	// Network lets sandboxed commands use the network when they ask.
	Network bool
	// ReadOnly removes write_file and edit_file and runs every command
	// in the read-only sandbox.
	ReadOnly bool
	// MaxHandles bounds a session's handles (default DefaultMaxHandles).
	MaxHandles int
	// MaxSessions bounds the MCP sessions open at once (default
	// DefaultMaxSessions); over HTTP a new session past it is refused
	// with 503.
	MaxSessions int
	// MaxTimeout bounds run's timeout_ms (default DefaultMaxTimeout).
	MaxTimeout time.Duration
	// Log receives an audit line per tool call (default: none).
	Log *zap.Logger
	// Name and Version are the server's implementation in initialize.
	Name, Version string
}

// DefaultConfig returns a configuration with every default filled in and
// no executors.
func DefaultConfig() Config {
	return Config{
		DefaultSandbox:   string(sandbox.ModeWorkspaceWrite),
		AllowedSandboxes: []string{string(sandbox.ModeReadOnly), string(sandbox.ModeWorkspaceWrite)},
		MaxHandles:       DefaultMaxHandles,
		MaxSessions:      DefaultMaxSessions,
		MaxTimeout:       DefaultMaxTimeout,
		Log:              zap.NewNop(),
		Name:             "outpost",
		Version:          "dev",
	}
}

// fill sets c's zero fields from DefaultConfig.
func (c *Config) fill() {
	d := DefaultConfig()
	if c.DefaultSandbox == "" {
		c.DefaultSandbox = d.DefaultSandbox
	}
	if c.AllowedSandboxes == nil {
		c.AllowedSandboxes = d.AllowedSandboxes
	}
	if c.MaxHandles == 0 {
		c.MaxHandles = d.MaxHandles
	}
	if c.MaxTimeout == 0 {
		c.MaxTimeout = d.MaxTimeout
	}
	if c.MaxSessions == 0 {
		c.MaxSessions = DefaultMaxSessions
	}
	if c.Log == nil {
		c.Log = d.Log
	}
	if c.Name == "" {
		c.Name = d.Name
	}
	if c.Version == "" {
		c.Version = d.Version
	}
}

// Validate reports the first invalid field, as it is (New fills zero
// fields first).
func (c Config) Validate() error {
	if len(c.Executors) == 0 {
		return fmt.Errorf("mcpserver: no executors")
	}
	if len(c.Executors) > maxExecutorsInConfig {
		return fmt.Errorf("mcpserver: %d executors, at most %d", len(c.Executors), maxExecutorsInConfig)
	}
	seen := map[string]bool{}
	for i, e := range c.Executors {
		if e.ID == "" || e.Dial == nil {
			return fmt.Errorf("mcpserver: executors[%d]: want an ID and a Dial", i)
		}
		if seen[e.ID] {
			return fmt.Errorf("mcpserver: executor %q listed twice", e.ID)
		}
		seen[e.ID] = true
	}
	if c.Workspace != "" && !path.IsAbs(c.Workspace) {
		return fmt.Errorf("mcpserver: workspace %q is not absolute", c.Workspace)
	}
	for _, m := range c.AllowedSandboxes {
		if _, err := sandbox.ParseMode(m); err != nil {
			return fmt.Errorf("mcpserver: allowed sandbox: %w", err)
		}
	}
	if _, err := sandbox.ParseMode(c.DefaultSandbox); err != nil {
		return fmt.Errorf("mcpserver: default sandbox: %w", err)
	}
	if !c.ReadOnly && !slices.Contains(c.AllowedSandboxes, c.DefaultSandbox) {
		return fmt.Errorf("mcpserver: the default sandbox %s is not among the allowed %v", c.DefaultSandbox, c.AllowedSandboxes)
	}
	if c.MaxHandles < 1 || c.MaxHandles > 1024 {
		return fmt.Errorf("mcpserver: MaxHandles %d: want 1 to 1024", c.MaxHandles)
	}
	if c.MaxSessions < 1 || c.MaxSessions > 100000 {
		return fmt.Errorf("mcpserver: MaxSessions %d: want 1 to 100000", c.MaxSessions)
	}
	if c.MaxTimeout <= 0 {
		return fmt.Errorf("mcpserver: MaxTimeout must be positive")
	}
	return nil
}
