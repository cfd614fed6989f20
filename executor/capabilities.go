package executor

import "github.com/outpost-exec/outpost/protocol"

// Capabilities is the capabilities object this executor advertises in
// initialize and environment/info: a flag is true exactly when the
// requests it gates are implemented here, so codex never calls what
// would fail and never skips what would work. codex 0.171 sends sixteen
// flags; a method of codex's that outpost lacks keeps its flag false.
func Capabilities(cfg Config) protocol.EnvironmentCapabilities {
	return protocol.EnvironmentCapabilities{
		// Not implemented: the managed network proxy (egress by domain
		// is its own work), credential masking, shell snapshots.
		NetworkProxyLaunch:         false,
		NetworkProxyReviewDomains:  false,
		NetworkProxyTransparentTCP: false,
		CredentialMasking:          false,
		ShellSnapshotV2:            false,
		// Windows only.
		WindowsMxc: false,

		FsWatchMissing:             true, // watch.go
		CapabilityDiscoveryV2:      true, // envconfig*.go, discover*.go
		CapabilityDiscoverySandbox: true,
		EnvironmentConfigRead:      true,
		HTTPHeaderEnvVars:          true, // http/request resolves valueEnvVar from Config.BaseEnv
		SandboxedFileStreaming:     true,
		FileWriteStreaming:         true,

		LinuxRootWritePreservesDevices:              false,
		LinuxApprovedRootWritePreservesRestrictions: false,
	}
}
