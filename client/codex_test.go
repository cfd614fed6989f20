package client

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/outpost-exec/outpost/executor"
	"github.com/outpost-exec/outpost/protocol"
)

// codexRemotes are one executor reached natively (codex/call) and over
// ws:// (codex's JSON as it is).
func codexRemotes(t *testing.T) map[string]*Remote {
	ex := startExecutor(t, nil)
	l, err := ex.srv.ListenWS("127.0.0.1:0", executor.WSConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return map[string]*Remote{"native": dial(t, ex.url, Config{}), "ws": dial(t, l.URL(), Config{})}
}

// CallCodex sends a codex request as JSON and returns the executor's JSON
// unchanged, on either transport: base64 stays base64.
func TestCallCodexCarriesJSONBothWays(t *testing.T) {
	for name, r := range codexRemotes(t) {
		t.Run(name, func(t *testing.T) {
			f := filepath.Join(t.TempDir(), "f")
			if err := os.WriteFile(f, []byte("hi\x00there"), 0o644); err != nil {
				t.Fatal(err)
			}
			params, _ := json.Marshal(map[string]any{"path": "file://" + f})
			res, err := r.CallCodex(ctxT(t), protocol.MethodFsReadFile, params)
			if err != nil {
				t.Fatal(err)
			}
			if string(res) != `{"dataBase64":"aGkAdGhlcmU="}` {
				t.Errorf("fs/readFile answered %s", res)
			}
			info, err := r.CallCodex(ctxT(t), protocol.MethodEnvironmentInfo, nil)
			if err != nil || !strings.Contains(string(info), `"cwd":"file:///`) {
				t.Errorf("environment/info: %s, %v", info, err)
			}
		})
	}
}

// The executor's refusals come back as *protocol.Error with their kinds;
// initialize and codex/call itself cannot be wrapped.
func TestCallCodexErrorsKeepTheirKinds(t *testing.T) {
	for name, r := range codexRemotes(t) {
		t.Run(name, func(t *testing.T) {
			_, err := r.CallCodex(ctxT(t), "nope/nope", nil)
			var pe *protocol.Error
			if !errors.As(err, &pe) || pe.Code != protocol.CodeMethodNotFound || protocol.KindOf(pe) != protocol.KindUnsupported {
				t.Errorf("unknown method: %v", err)
			}
			_, err = r.CallCodex(ctxT(t), protocol.MethodFsReadFile, json.RawMessage(`{"path":"file:///nonexistent/x"}`))
			if !errors.As(err, &pe) || pe.Code != protocol.CodeNotFound || protocol.KindOf(pe) != protocol.KindNotFound {
				t.Errorf("missing file: %v", err)
			}
			_, err = r.CallCodex(ctxT(t), protocol.MethodFsReadFile, json.RawMessage(`{"path":`))
			if err == nil {
				t.Error("truncated JSON params accepted")
			}
			if name == "native" {
				for _, inner := range []string{protocol.MethodInitialize, protocol.MethodCodexCall, ""} {
					var res protocol.CodexCallResult
					err := r.Call(ctxT(t), protocol.MethodCodexCall, protocol.CodexCallParams{Method: inner}, &res)
					if !errors.As(err, &pe) || protocol.KindOf(pe) != protocol.KindInvalid {
						t.Errorf("codex/call of %q: %v", inner, err)
					}
				}
			}
		})
	}
}
