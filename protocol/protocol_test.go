package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// Every struct field must carry json and msgpack tags with the same name,
// so the two codecs can never disagree about a field.
func TestEveryFieldHasMatchingJSONAndMsgpackTags(t *testing.T) {
	types := []any{
		InitializeParams{}, InitializeResult{}, EnvPolicy{}, ManagedNetwork{}, ExecParams{}, StartResult{},
		ReadParams{}, OutputChunk{}, Gap{}, ReadResult{}, WriteParams{}, WriteResult{}, SignalParams{},
		TerminateParams{}, TerminateResult{}, ResizeParams{}, Shell{}, EnvironmentInfo{},
		OutputNotification{}, ExitedNotification{}, ClosedNotification{}, Error{}, ErrorData{}, EventsStreamHeader{}, RelayJoinParams{}, RelayConnectParams{}, RelayDataParams{}, RelayConnectResult{}, RelayExecutor{}, RelayExecutorsParams{}, RelayExecutorsResult{},
	}
	for _, v := range types {
		rt := reflect.TypeOf(v)
		for i := 0; i < rt.NumField(); i++ {
			f := rt.Field(i)
			j, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			m, _, _ := strings.Cut(f.Tag.Get("msgpack"), ",")
			if j == "" || j != m {
				t.Errorf("%s.%s: json %q, msgpack %q", rt.Name(), f.Name, j, m)
			}
			if j != "" && strings.ToLower(j[:1]) != j[:1] {
				t.Errorf("%s.%s: JSON name %q is not camelCase", rt.Name(), f.Name, j)
			}
		}
	}
}

func TestWireNamesMatchCodex(t *testing.T) {
	b, _ := json.Marshal(ExecParams{ProcessID: "p", Argv: []string{"true"}, Cwd: "file:///tmp", Env: map[string]string{}, PipeStdin: true})
	want := `{"processId":"p","argv":["true"],"cwd":"file:///tmp","env":{},"tty":false,"pipeStdin":true}`
	if string(b) != want {
		t.Fatalf("ExecParams:\n got %s\nwant %s", b, want)
	}
	code := int32(7)
	b, _ = json.Marshal(ReadResult{Chunks: []OutputChunk{{Seq: 1, Stream: StreamStdout, Chunk: []byte("out")}}, NextSeq: 2, Exited: true, ExitCode: &code})
	want = `{"chunks":[{"seq":1,"stream":"stdout","chunk":"b3V0"}],"nextSeq":2,"exited":true,"exitCode":7,"closed":false,"failure":null,"sandboxDenied":false}`
	if string(b) != want {
		t.Fatalf("ReadResult:\n got %s\nwant %s", b, want)
	}
}

func TestLegacyExitedPayloadWithoutSandboxDeniedParses(t *testing.T) {
	var n ExitedNotification
	if err := json.Unmarshal([]byte(`{"processId":"p","seq":3,"exitCode":7}`), &n); err != nil {
		t.Fatal(err)
	}
	if n.SandboxDenied != nil || n.ExitCode != 7 || n.Seq != 3 {
		t.Fatalf("%+v", n)
	}
}

// The limit a command ran into is an outpost addition: present only when
// there is one, so codex peers never see the key.
func TestExitedLimitIsOmittedUnlessAKnownLimitWasHit(t *testing.T) {
	b, _ := json.Marshal(ExitedNotification{ProcessID: "p", Seq: 3, ExitCode: 137, Signal: 9, Limit: LimitMemory})
	if want := `{"processId":"p","seq":3,"exitCode":137,"signal":9,"limit":"memory"}`; string(b) != want {
		t.Fatalf("got %s\nwant %s", b, want)
	}
	b, _ = json.Marshal(ExitedNotification{ProcessID: "p", Seq: 3, ExitCode: 1})
	if bytes.Contains(b, []byte("limit")) {
		t.Fatalf("limit without one: %s", b)
	}
}

func TestEnvironmentInfoWithoutCwdParses(t *testing.T) {
	var info EnvironmentInfo
	if err := json.Unmarshal([]byte(`{"shell":{"name":"bash","path":"/bin/bash"}}`), &info); err != nil || info.Cwd != "" {
		t.Fatalf("%+v %v", info, err)
	}
}

func TestParseSignalAcceptsConventionalNames(t *testing.T) {
	for in, want := range map[string]Signal{
		"interrupt": SignalInterrupt, "INT": SignalInterrupt, "SIGINT": SignalInterrupt,
		"terminate": SignalTerminate, "sigterm": SignalTerminate, "HUP": SignalHangup, "kill": SignalKill,
		"QUIT": SignalQuit, "usr1": SignalUser1, "SIGUSR2": SignalUser2, "user2": SignalUser2,
	} {
		if got, ok := ParseSignal(in); !ok || got != want {
			t.Errorf("ParseSignal(%q) = %q, %v", in, got, ok)
		}
	}
	for _, bad := range []string{"", "SIGSEGV", "stop", "9"} {
		if _, ok := ParseSignal(bad); ok {
			t.Errorf("ParseSignal(%q) accepted", bad)
		}
	}
	for _, s := range Signals {
		if got, ok := ParseSignal(string(s)); !ok || got != s {
			t.Errorf("listed signal %q does not parse", s)
		}
	}
}

func TestErrorImplementsError(t *testing.T) {
	var err error = Errorf(CodeInvalidParams, "bad %s", "field")
	if err.Error() != "bad field" {
		t.Fatal(err)
	}
}
