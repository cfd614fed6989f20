//go:build linux || darwin || freebsd

package executor

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/sandbox"
)

// startMarker starts `touch marker` in a fresh directory with opts laid
// over the params, and reports the start's error and whether the command
// ran (the marker exists once it has closed).
func startMarker(t *testing.T, sess *Session, id string, opts func(*protocol.ExecParams)) (protocol.StartResult, error, bool) {
	t.Helper()
	dir := t.TempDir()
	p := protocol.ExecParams{ProcessID: id, Argv: []string{"/bin/sh", "-c", "touch marker"}, Cwd: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}
	if opts != nil {
		opts(&p)
	}
	res, err := sess.Start(context.Background(), p)
	if err == nil {
		collect(t, sess.lookup(id).proc)
	}
	_, statErr := os.Stat(filepath.Join(dir, "marker"))
	return res, err, statErr == nil
}

func wantRefusal(t *testing.T, err error, kind protocol.Kind, code int, msg string) {
	t.Helper()
	var pe *protocol.Error
	if !errors.As(err, &pe) || pe.Kind() != kind || pe.Code != code || (msg != "" && pe.Message != msg) {
		t.Fatalf("got %#v, want kind %s code %d %q", err, kind, code, msg)
	}
}

func wellFormedProxy(enabled bool) *protocol.NetworkProxyLaunch {
	return &protocol.NetworkProxyLaunch{Proxy: protocol.NetworkProxyConfig{Enabled: enabled, Mode: "full"}}
}

// outpost launches no network proxy: a command that asks for one is not
// run at all, rather than run with the network the proxy would restrict.
func TestStartRefusesANetworkProxyItCannotLaunchAndRunsNothing(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	_, err, ran := startMarker(t, sess, "np", func(p *protocol.ExecParams) { p.NetworkProxy = wellFormedProxy(true) })
	wantRefusal(t, err, protocol.KindUnsupported, protocol.CodeInvalidRequest, "")
	if ran {
		t.Fatal("the command ran without the network proxy it asked for")
	}
	if sess.lookup("np") != nil {
		t.Fatal("the refused start left a process table entry")
	}
}

// What codex's server refuses before it would launch a proxy, outpost
// refuses with codex's code and words.
func TestStartRefusesAProxyConfigCodexRefuses(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	_, err, ran := startMarker(t, sess, "off", func(p *protocol.ExecParams) { p.NetworkProxy = wellFormedProxy(false) })
	wantRefusal(t, err, protocol.KindInvalid, protocol.CodeInvalidParams,
		"invalid network proxy config: executor-local network proxy launch requires an enabled proxy")
	if ran {
		t.Fatal("ran")
	}
	zero := uint64(0)
	_, err, ran = startMarker(t, sess, "zero", func(p *protocol.ExecParams) {
		p.NetworkProxy = wellFormedProxy(true)
		p.NetworkProxy.PolicyDecisionTimeoutMs = &zero
	})
	wantRefusal(t, err, protocol.KindInvalid, protocol.CodeInvalidParams, "network policy decision callback timeout must be nonzero")
	if ran {
		t.Fatal("ran")
	}
}

// outpost keeps no shell snapshots: a command that asks for one is not
// run in an environment other than the one it asked for.
func TestStartRefusesAShellSnapshotAndRunsNothing(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	_, err, ran := startMarker(t, sess, "snap", func(p *protocol.ExecParams) {
		p.ShellSnapshot = &protocol.ShellSnapshotRequest{ScopeID: "s", Shell: protocol.Shell{Name: "bash", Path: "/bin/bash"}}
	})
	wantRefusal(t, err, protocol.KindUnsupported, protocol.CodeInvalidRequest, "")
	if ran {
		t.Fatal("the command ran without the shell snapshot it asked for")
	}
}

func TestStartAcceptsMetadataAndReportsSandboxTypeNone(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	thread, call := "00000000-0000-4000-8000-000000000000", "call-1"
	res, err, ran := startMarker(t, sess, "meta", func(p *protocol.ExecParams) {
		p.Metadata = &protocol.ExecMetadata{ThreadID: &thread, ToolCallID: &call}
	})
	if err != nil || !ran {
		t.Fatalf("start with metadata: %v (ran %v)", err, ran)
	}
	if res.SandboxType != "none" {
		t.Fatalf("sandboxType %q, want none (codex 0.171 always sends it)", res.SandboxType)
	}
}

// A policy the helper enforces is codex's linuxSeccomp; full access runs
// the command as is, which codex calls none.
func TestStartReportsCodexSandboxTypes(t *testing.T) {
	_, sess := newTestSession(t, engine.NewLocalBackend())
	res, err, ran := startMarker(t, sess, "full", func(p *protocol.ExecParams) { p.Sandbox = map[string]any{"mode": "full-access"} })
	if err != nil || !ran || res.SandboxType != "none" {
		t.Fatalf("full access: %+v %v ran=%v", res, err, ran)
	}
	requireSandbox(t)
	res, err, _ = startMarker(t, sess, "ws", func(p *protocol.ExecParams) { p.Sandbox = map[string]any{"mode": "workspace-write"} })
	if err != nil || res.SandboxType != sandbox.TypeLinux || sandbox.TypeLinux != "linuxSeccomp" {
		t.Fatalf("workspace-write: %+v %v", res, err)
	}
}

// The start log keeps codex's attribution, each value bounded.
func TestStartLogsMetadataBounded(t *testing.T) {
	core, logs := observer.New(zap.InfoLevel)
	cfg := DefaultConfig()
	cfg.Logger = zap.New(core)
	cfg.Backend = engine.NewLocalBackend()
	cfg.DefaultCwd = t.TempDir()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	sess, err := srv.newSession()
	if err != nil {
		t.Fatal(err)
	}
	thread, call := "00000000-0000-4000-8000-000000000000", strings.Repeat("c", 10000)
	if _, err, _ := startMarker(t, sess, "m", func(p *protocol.ExecParams) {
		p.Metadata = &protocol.ExecMetadata{ThreadID: &thread, ToolCallID: &call}
	}); err != nil {
		t.Fatal(err)
	}
	started := logs.FilterMessage("process started").All()
	if len(started) != 1 {
		t.Fatalf("%d start lines", len(started))
	}
	fields := started[0].ContextMap()
	if fields["thread_id"] != thread || fields["tool_call_id"] != strings.Repeat("c", maxLoggedMetadataBytes)+"…" {
		t.Fatalf("logged %v", fields)
	}
}
