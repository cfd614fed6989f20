package executor

import (
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// validateStartOptions judges process/start's codex 0.171 options once
// their shape is right (the JSON codec checks it as codex does; see
// protocol/execparams_json.go).
//
//   - networkProxy asks for an executor-local managed proxy that the
//     command's network goes through. outpost launches none (capability
//     networkProxyLaunch is false), and running the command without it
//     would give it the network the client meant to restrict: refused,
//     kind unsupported. What codex's server refuses before it would launch
//     one (a disabled proxy, a zero decision timeout) outpost refuses the
//     same way, with codex's code and words.
//   - shellSnapshot asks for the shell state captured for a scope to be
//     restored around the command. outpost keeps no snapshots (capability
//     shellSnapshotV2 is false), and the command run without that state
//     would see another environment than the one asked for: refused, kind
//     unsupported, rather than run differently in silence.
//   - metadata is telemetry; codex does nothing observable with it.
//     outpost logs it with the start.
func validateStartOptions(p *protocol.ExecParams) error {
	if np := p.NetworkProxy; np != nil {
		if !np.Proxy.Enabled {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams,
				"invalid network proxy config: executor-local network proxy launch requires an enabled proxy")
		}
		if np.PolicyDecisionTimeoutMs != nil && *np.PolicyDecisionTimeoutMs == 0 {
			return protocol.KindErrorf(protocol.KindInvalid, protocol.CodeInvalidParams,
				"network policy decision callback timeout must be nonzero")
		}
		return protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
			"networkProxy cannot be honoured: this executor launches no managed network proxy (capability networkProxyLaunch is false), so the command was not run")
	}
	if p.ShellSnapshot != nil {
		return protocol.KindErrorf(protocol.KindUnsupported, protocol.CodeInvalidRequest,
			"shellSnapshot cannot be honoured: this executor keeps no shell snapshots (capability shellSnapshotV2 is false), so the command was not run")
	}
	return nil
}

// reportedSandboxType is process/start's sandboxType: codex 0.171's name
// for how the command runs. outpost's Linux sandbox helper is codex's
// "linuxSeccomp" (sandbox.TypeLinux); a command run as is, with no policy
// or a full-access one, is "none", which codex 0.171 always sends too.
func reportedSandboxType(specType string) string {
	if specType == "" {
		return sandbox.TypeNone
	}
	return specType
}

// maxLoggedMetadataBytes bounds each attribution value the start log
// keeps: the client chooses them, and a log line is not a place for a
// megabyte of it.
const maxLoggedMetadataBytes = 256

// metadataFields are the start log's fields for codex's attribution.
func metadataFields(m *protocol.ExecMetadata) []zap.Field {
	if m == nil {
		return nil
	}
	var fields []zap.Field
	if m.ThreadID != nil {
		fields = append(fields, zap.String("thread_id", clip(*m.ThreadID)))
	}
	if m.ToolCallID != nil {
		fields = append(fields, zap.String("tool_call_id", clip(*m.ToolCallID)))
	}
	return fields
}

// clip cuts s to maxLoggedMetadataBytes, marking the cut.
func clip(s string) string {
	if len(s) <= maxLoggedMetadataBytes {
		return s
	}
	return s[:maxLoggedMetadataBytes] + "…"
}
