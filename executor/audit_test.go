package executor

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/outpost-exec/outpost/engine"
	"github.com/outpost-exec/outpost/protocol"
)

// auditSession is newTestSession logging to an observer at level.
func auditSession(t *testing.T, b engine.Backend, level zapcore.Level) (*Session, *observer.ObservedLogs) {
	t.Helper()
	core, logs := observer.New(level)
	cfg := DefaultConfig()
	cfg.Logger = zap.New(core)
	cfg.Backend = b
	cfg.DefaultCwd = t.TempDir()
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	sess, err := srv.newSession()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), testTimeout)
		defer cancel()
		srv.Shutdown(ctx)
	})
	return sess, logs
}

func waitLogEntry(t *testing.T, logs *observer.ObservedLogs, msg string) observer.LoggedEntry {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		if got := logs.FilterMessage(msg).All(); len(got) > 0 {
			return got[0]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q log line; have %v", msg, logs.All())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Every process start and exit is an info line with the audit fields; the
// argv (it may hold secrets) shows only as its sha256, and the
// environment never.
func TestProcessStartAndExitAreAuditedWithoutTheArgv(t *testing.T) {
	mb := &MockBackend{Script: func(engine.Spec) []MockStep { return []MockStep{{Exit: true, Code: 3}} }}
	sess, logs := auditSession(t, mb, zap.InfoLevel)
	argv := []string{"deploy", "--password=hunter2"}
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p1", Argv: argv, Env: map[string]string{"API_KEY": "s3cret"}}); err != nil {
		t.Fatal(err)
	}
	start := waitLogEntry(t, logs, "process started")
	exit := waitLogEntry(t, logs, "process exited")
	if start.Level != zap.InfoLevel || exit.Level != zap.InfoLevel {
		t.Fatalf("levels %v %v", start.Level, exit.Level)
	}
	f := start.ContextMap()
	if f["session"] != sess.ID() || f["process"] != "p1" || f["sandbox"] != "none" || f["argv_sha256"] != argvDigest(argv) || len(argvDigest(argv)) != 64 {
		t.Fatalf("start fields %v", f)
	}
	if _, ok := f["argv"]; ok {
		t.Fatalf("argv logged at info level: %v", f)
	}
	if _, ok := f["client"]; ok {
		t.Fatalf("a session without a handshake has no client key: %v", f)
	}
	e := exit.ContextMap()
	if e["session"] != sess.ID() || e["process"] != "p1" || e["exit_code"] != int32(3) || e["signal"] != int32(0) {
		t.Fatalf("exit fields %v", e)
	}
	if _, ok := e["duration"].(time.Duration); !ok {
		t.Fatalf("exit has no duration: %v", e)
	}
	for _, entry := range logs.All() {
		line := entry.Message
		for k, v := range entry.ContextMap() {
			line += " " + k + "=" + strings.TrimSpace(strings.ReplaceAll(fmtAny(v), "\n", " "))
		}
		for _, secret := range []string{"hunter2", "s3cret", "API_KEY"} {
			if strings.Contains(line, secret) {
				t.Errorf("log line leaks %q: %s", secret, line)
			}
		}
	}
	if argvDigest([]string{"a b"}) == argvDigest([]string{"a", "b"}) {
		t.Fatal("argv digest does not separate arguments")
	}
}

// At debug level the start line carries the argv itself.
func TestProcessStartLogsTheArgvAtDebugLevel(t *testing.T) {
	mb := &MockBackend{Script: func(engine.Spec) []MockStep { return []MockStep{{Exit: true}} }}
	sess, logs := auditSession(t, mb, zap.DebugLevel)
	if _, err := sess.Start(context.Background(), protocol.ExecParams{ProcessID: "p1", Argv: []string{"echo", "hi"}}); err != nil {
		t.Fatal(err)
	}
	f := waitLogEntry(t, logs, "process started").ContextMap()
	if got, ok := f["argv"].([]any); !ok || len(got) != 2 || got[0] != "echo" || got[1] != "hi" {
		t.Fatalf("argv at debug: %#v", f["argv"])
	}
}

func fmtAny(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case []any:
		var b strings.Builder
		for _, e := range x {
			b.WriteString(fmtAny(e) + " ")
		}
		return b.String()
	}
	return ""
}
