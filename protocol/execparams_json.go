package protocol

import "encoding/json"

// The shapes of process/start's codex 0.171 options (exec_options.go), as
// codex's server decodes them: every field, its type, and whether it may
// be missing.
var (
	shapeStr  = &shape{kind: shapeString}
	shapeFlag = &shape{kind: shapeBool}

	// ExecMetadata: threadId is codex's ThreadId, a UUID.
	execMetadataShape = &shape{kind: shapeStruct, name: "ExecMetadata", fields: []shapeField{
		{name: "threadId", shape: &shape{kind: shapeUUID}, option: true, dflt: true},
		{name: "toolCallId", shape: shapeStr, option: true, dflt: true},
	}}

	shellSnapshotShape = &shape{kind: shapeStruct, name: "ShellSnapshotRequest", fields: []shapeField{
		{name: "scopeId", shape: shapeStr},
		{name: "shell", shape: &shape{kind: shapeStruct, name: "ShellInfo", fields: []shapeField{
			{name: "name", shape: shapeStr},
			{name: "path", shape: shapeStr},
		}}},
	}}

	networkProxyAuditShape = &shape{kind: shapeStruct, name: "NetworkProxyAuditMetadata", fields: optionalStrings(
		"conversationId", "appVersion", "userAccountId", "authMode", "originator", "userEmail", "terminalType", "model", "slug")}

	networkProxyConfigShape = &shape{kind: shapeStruct, name: "RemoteNetworkProxyConfig", fields: []shapeField{
		{name: "enabled", shape: shapeFlag},
		{name: "enableSocks5", shape: shapeFlag},
		{name: "enableSocks5Udp", shape: shapeFlag},
		{name: "allowUpstreamProxy", shape: shapeFlag},
		{name: "dangerouslyAllowAllUnixSockets", shape: shapeFlag},
		{name: "mode", shape: &shape{kind: shapeEnum, variants: []string{"limited", "full"}}},
		{name: "domains", option: true, shape: &shape{kind: shapeMap,
			elem: &shape{kind: shapeEnum, variants: []string{"none", "allow", "deny"}}}},
		{name: "unixSockets", option: true, shape: &shape{kind: shapePaths, name: "NetworkUnixSocketPermissions",
			elem: &shape{kind: shapeEnum, variants: []string{"allow", "deny"}, counted: true}}},
		{name: "allowLocalBinding", shape: shapeFlag},
	}}

	networkProxyShape = &shape{kind: shapeStruct, name: "RemoteNetworkProxyLaunchConfig", fields: []shapeField{
		{name: "proxy", shape: networkProxyConfigShape},
		{name: "auditMetadata", shape: networkProxyAuditShape, dflt: true},
		{name: "environmentId", shape: shapeStr, option: true, dflt: true},
		{name: "executionId", shape: shapeStr, option: true, dflt: true},
		{name: "policyDecisionTimeoutMs", shape: &shape{kind: shapeU64}, option: true, dflt: true},
	}}

	// execParamsStrict are the process/start params checked as codex
	// checks them. The older params keep encoding/json's leniency, which
	// outpost's own clients rely on (a nil env, no tty, a plain path).
	execParamsStrict = map[string]*shapeField{
		"metadata":      {name: "metadata", shape: execMetadataShape, option: true, dflt: true},
		"shellSnapshot": {name: "shellSnapshot", shape: shellSnapshotShape, option: true, dflt: true},
		"networkProxy":  {name: "networkProxy", shape: networkProxyShape, option: true, dflt: true},
	}
)

func optionalStrings(names ...string) []shapeField {
	fields := make([]shapeField, len(names))
	for i, n := range names {
		fields[i] = shapeField{name: n, shape: shapeStr, option: true, dflt: true}
	}
	return fields
}

// UnmarshalJSON decodes process/start params, refusing a metadata,
// shellSnapshot or networkProxy that codex's server would refuse: an
// *Error of kind invalid with codex's code (-32602) and words. (msgpack
// peers are outpost's own: their values are judged by type when decoded
// and by meaning when the process starts.)
func (p *ExecParams) UnmarshalJSON(b []byte) error {
	if err := checkObjectFields(b, execParamsStrict); err != nil {
		return KindErrorf(KindInvalid, CodeInvalidParams, "%s", err.Error())
	}
	type plain ExecParams // without this method
	return json.Unmarshal(b, (*plain)(p))
}
