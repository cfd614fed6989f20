package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/vmihailenco/msgpack/v5"
)

const baseStart = `"processId":"p","argv":["true"],"cwd":"file:///tmp","env":{},"tty":false`

const proxyNoMode = `"enabled":true,"enableSocks5":false,"enableSocks5Udp":false,"allowUpstreamProxy":false,"dangerouslyAllowAllUnixSockets":false,"allowLocalBinding":false`

const wellFormedProxy = proxyNoMode + `,"mode":"full"`

// Each want is what codex 0.171's exec-server answered for the same
// params (captured with its binary); "" means it accepted them.
var execParamsCases = []struct{ extra, want string }{
	{`"metadata":5`, "invalid type: number, expected struct ExecMetadata"},
	{`"metadata":true`, "invalid type: boolean `true`, expected struct ExecMetadata"},
	{`"metadata":"s"`, `invalid type: string "s", expected struct ExecMetadata`},
	{`"metadata":[1]`, "invalid type: number, expected a string"},
	{`"metadata":{}`, ""},
	{`"metadata":null`, ""},
	{`"metadata":{"zzz":5}`, ""},
	{`"metadata":{"toolCallId":5}`, "invalid type: number, expected a string"},
	{`"metadata":{"toolCallId":[1]}`, "invalid type: sequence, expected a string"},
	{`"metadata":{"toolCallId":{}}`, "invalid type: map, expected a string"},
	{`"metadata":{"toolCallId":null}`, ""},
	{`"metadata":{"threadId":"t","toolCallId":"c"}`, "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `t` at 1"},
	{`"metadata":{"threadId":"abc"}`, "invalid length: expected length 32 for simple format, found 3"},
	{`"metadata":{"threadId":""}`, "invalid length: expected length 32 for simple format, found 0"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000-00000000000"}`, "invalid group length in group 4: expected 12, found 11"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000-0000000000000"}`, "invalid group length in group 4: expected 12, found 13"},
	{`"metadata":{"threadId":"0000000-00000-4000-8000-000000000000"}`, "invalid group length in group 0: expected 8, found 7"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000"}`, "invalid group count: expected 5, found 4"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000-000000000000-0000"}`, "invalid group count: expected 5, found 6"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000-00000000000g"}`, "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `g` at 36"},
	{`"metadata":{"threadId":"0000000g-0000-4000-8000-000000000000"}`, "invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `g` at 8"},
	{`"metadata":{"threadId":"00000000-0000-4000-8000-000000000000"}`, ""},
	{`"metadata":{"threadId":"00000000000040008000000000000000"}`, ""},
	{`"metadata":{"threadId":"urn:uuid:00000000-0000-4000-8000-000000000000"}`, ""},
	{`"metadata":{"threadId":"{00000000-0000-4000-8000-000000000000}"}`, ""},

	{`"shellSnapshot":{}`, "missing field `scopeId`"},
	{`"shellSnapshot":{"scopeId":"x"}`, "missing field `shell`"},
	{`"shellSnapshot":{"scopeId":5,"shell":{"name":"b","path":"p"}}`, "invalid type: number, expected a string"},
	{`"shellSnapshot":{"scopeId":null,"shell":{"name":"b","path":"p"}}`, "invalid type: null, expected a string"},
	{`"shellSnapshot":{"scopeId":[1],"shell":{"name":"b","path":"p"}}`, "invalid type: sequence, expected a string"},
	{`"shellSnapshot":{"scopeId":"s","shell":{"name":"b","path":"p"}}`, ""},
	{`"shellSnapshot":null`, ""},

	{`"networkProxy":2`, "invalid type: number, expected struct RemoteNetworkProxyLaunchConfig"},
	{`"networkProxy":{}`, "missing field `proxy`"},
	{`"networkProxy":[]`, "invalid length 0, expected struct RemoteNetworkProxyLaunchConfig with 5 elements"},
	{`"networkProxy":[{"enabled":false}]`, "missing field `enableSocks5`"},
	{`"networkProxy":{"proxy":5}`, "invalid type: number, expected struct RemoteNetworkProxyConfig"},
	{`"networkProxy":{"proxy":{}}`, "missing field `enabled`"},
	{`"networkProxy":{"proxy":{},"proxy":{}}`, "missing field `enabled`"},
	{`"networkProxy":{"proxy":{"enabled":5}}`, "invalid type: number, expected a boolean"},
	{`"networkProxy":{"proxy":{"enabled":"s"}}`, `invalid type: string "s", expected a boolean`},
	{`"networkProxy":{"proxy":{"enabled":true}}`, "missing field `enableSocks5`"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `}}`, ""},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":"x"}}`, "unknown variant `x`, expected `limited` or `full`"},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":5}}`, "invalid type: number, expected string or map"},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":null}}`, "invalid type: null, expected string or map"},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":{"full":null}}}`, ""},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":{"full":1}}}`, "invalid type: number, expected unit"},
	{`"networkProxy":{"proxy":{` + proxyNoMode + `,"mode":{}}}`, "invalid value: map, expected map with a single key"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":5}}`, "invalid type: number, expected a map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":[]}}`, "invalid type: sequence, expected a map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":{"a":5}}}`, "invalid type: number, expected string or map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":{"a":"x"}}}`, "unknown variant `x`, expected one of `none`, `allow`, `deny`"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":{"a":"none","b":{"allow":null}}}}`, ""},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"domains":null}}`, ""},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":5}}`, "invalid type: number, expected struct NetworkUnixSocketPermissions"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":[]}}`, "invalid type: sequence, expected struct NetworkUnixSocketPermissions"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"x":5}}}`, "invalid type: integer `5`, expected string or map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"a":-1}}}`, "invalid type: integer `-1`, expected string or map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"a":1.5}}}`, "invalid type: floating point `1.5`, expected string or map"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"a":{"allow":1}}}}`, "invalid type: integer `1`, expected unit"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"/a":"x"}}}`, "unknown variant `x`, expected `allow` or `deny`"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `,"unixSockets":{"/a":"allow"}}}`, ""},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"auditMetadata":true}`, "invalid type: boolean `true`, expected struct NetworkProxyAuditMetadata"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"auditMetadata":{"slug":5}}`, "invalid type: number, expected a string"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"auditMetadata":{"turnId":5}}`, ""},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"environmentId":true}`, "invalid type: boolean `true`, expected a string"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":true}`, "invalid type: boolean `true`, expected u64"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":"5"}`, `invalid type: string "5", expected u64`},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":-1}`, "invalid number"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":1.5}`, "invalid number"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":1e3}`, "invalid number"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":18446744073709551616}`, "invalid number"},
	{`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":null}`, ""},
	{`"networkProxy":null`, ""},
}

func TestExecParamsJSONRefusesWhatCodexRefuses(t *testing.T) {
	for _, c := range execParamsCases {
		var p ExecParams
		err := json.Unmarshal([]byte("{"+baseStart+","+c.extra+"}"), &p)
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != c.want {
			t.Errorf("%s:\n  got  %q\n  want %q", c.extra, got, c.want)
		}
	}
}

// The first bad option in document order is the one named, as codex's
// decoder names it.
func TestExecParamsJSONNamesTheFirstBadOptionInDocumentOrder(t *testing.T) {
	var p ExecParams
	err := json.Unmarshal([]byte(`{"networkProxy":{},"metadata":5,`+baseStart+`}`), &p)
	if err == nil || err.Error() != "missing field `proxy`" {
		t.Fatalf("got %v", err)
	}
	err = json.Unmarshal([]byte(`{"metadata":5,"metadata":{},`+baseStart+`}`), &p)
	if err == nil || err.Error() != "invalid type: number, expected struct ExecMetadata" {
		t.Fatalf("got %v", err)
	}
	err = json.Unmarshal([]byte(`{"metadata":{},"metadata":{},`+baseStart+`}`), &p)
	if err == nil || err.Error() != "duplicate field `metadata`" {
		t.Fatalf("got %v", err)
	}
}

func TestExecParamsJSONKeepsItsOldLeniencyAndDecodesTheOptions(t *testing.T) {
	var p ExecParams
	raw := `{"processId":"p","argv":["true"],"metadata":{"threadId":"00000000-0000-4000-8000-000000000000","toolCallId":"c"},` +
		`"shellSnapshot":{"scopeId":"s","shell":{"name":"bash","path":"/bin/bash"}},` +
		`"networkProxy":{"proxy":{` + wellFormedProxy + `},"policyDecisionTimeoutMs":7}}`
	if err := json.Unmarshal([]byte(raw), &p); err != nil {
		t.Fatal(err) // no env, tty or cwd: outpost's own clients omit them
	}
	if *p.Metadata.ToolCallID != "c" || p.ShellSnapshot.Shell.Path != "/bin/bash" || !p.NetworkProxy.Proxy.Enabled || *p.NetworkProxy.PolicyDecisionTimeoutMs != 7 {
		t.Fatalf("%+v", p)
	}
	// The other params are judged by encoding/json as before.
	err := json.Unmarshal([]byte(`{"processId":5}`), &p)
	if err == nil || !strings.Contains(err.Error(), "processId") {
		t.Fatalf("got %v", err)
	}
}

func TestExecParamsJSONBoundsNesting(t *testing.T) {
	deep := strings.Repeat("[", 200) + strings.Repeat("]", 200)
	var p ExecParams
	err := json.Unmarshal([]byte(`{"metadata":{"toolCallId":`+deep+`}}`), &p)
	if err == nil || err.Error() != "recursion limit exceeded" {
		t.Fatalf("got %v", err)
	}
	ok := strings.Repeat("[", maxShapeDepth-2) + strings.Repeat("]", maxShapeDepth-2)
	err = json.Unmarshal([]byte(`{"metadata":{"toolCallId":`+ok+`}}`), &p)
	if err == nil || err.Error() != "invalid type: sequence, expected a string" {
		t.Fatalf("got %v", err)
	}
}

// msgpack carries the options too (the native transport and the bridge),
// so the executor can refuse them whichever codec brought them.
func TestExecOptionsTravelInMsgpack(t *testing.T) {
	id, timeout := "00000000-0000-4000-8000-000000000000", uint64(5)
	in := ExecParams{ProcessID: "p", Argv: []string{"true"}, Metadata: &ExecMetadata{ThreadID: &id},
		ShellSnapshot: &ShellSnapshotRequest{ScopeID: "s", Shell: Shell{Name: "bash", Path: "/bin/bash"}},
		NetworkProxy:  &NetworkProxyLaunch{Proxy: NetworkProxyConfig{Enabled: true, Mode: "full"}, PolicyDecisionTimeoutMs: &timeout}}
	b, err := msgpack.Marshal(&in)
	if err != nil {
		t.Fatal(err)
	}
	var out ExecParams
	if err := msgpack.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	if *out.Metadata.ThreadID != id || out.ShellSnapshot.ScopeID != "s" || !out.NetworkProxy.Proxy.Enabled || out.NetworkProxy.Proxy.Mode != "full" || *out.NetworkProxy.PolicyDecisionTimeoutMs != 5 {
		t.Fatalf("%+v", out)
	}
	b, _ = msgpack.Marshal(&ExecParams{ProcessID: "p"})
	var m map[string]any
	msgpack.Unmarshal(b, &m)
	for _, k := range []string{"metadata", "shellSnapshot", "networkProxy"} {
		if _, ok := m[k]; ok {
			t.Fatalf("%s sent when unset: %v", k, m)
		}
	}
}

// The refusal is an *Error with codex's code, so a decoder that passes it
// on unchanged sends exactly codex's answer.
func TestExecParamsJSONRefusalIsAnInvalidParamsError(t *testing.T) {
	var p ExecParams
	err := json.Unmarshal([]byte(`{"metadata":5}`), &p)
	var pe *Error
	if !errors.As(err, &pe) || pe.Code != CodeInvalidParams || pe.Kind() != KindInvalid || pe.Message != "invalid type: number, expected struct ExecMetadata" {
		t.Fatalf("got %#v", err)
	}
}

// codex 0.145 and 0.171 send sandboxDenied in every process/exited, false
// when not denied; so does every codec of outpost's.
func TestExitedAlwaysCarriesSandboxDenied(t *testing.T) {
	ev := Event{Kind: EventExited, Seq: 2, ExitCode: 1}
	b, _ := json.Marshal(ev.Params("p"))
	if want := `{"processId":"p","seq":2,"exitCode":1,"sandboxDenied":false}`; string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	b, _ = msgpack.Marshal(ev.Params("p"))
	var m map[string]any
	if err := msgpack.Unmarshal(b, &m); err != nil || m["sandboxDenied"] != false {
		t.Fatalf("msgpack: %v %v", m, err)
	}
}
