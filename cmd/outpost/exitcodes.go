package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/outpost-exec/outpost/client"
	"github.com/outpost-exec/outpost/identity"
	"github.com/outpost-exec/outpost/protocol"
	"github.com/outpost-exec/outpost/relay/relayclient"
	"github.com/outpost-exec/outpost/transport"
)

// The exit statuses of outpost exec and cp besides the command's own (the
// README's table is this one). A command that ran exits with its own
// status, or 128+n when signal n killed it; outpost's own failures take
// codes commands seldom use, as ssh (255) and docker run (125-127) do.
// --json tells the two apart without doubt: its "exit" event is the
// command's, its "error" event outpost's.
//
// The code is decided by the failure's kind (protocol.KindOf, the error
// types of identity, relayclient and transport), never by its message.
const (
	exitUsage      = 2   // bad flags, URL, fingerprint, executor id or sandbox mode: nothing was sent
	exitRefused    = 118 // authentication or authorisation failed: token unknown, revoked, expired or used up; not allowed to reach that executor; this client's key refused; an executor or relay key that is not the one pinned
	exitCwdMissing = 119 // the working directory does not exist on the executor (or is no directory, or may not be entered)
	exitUnknown    = 120 // the relay has never had an executor by that id (a typo; waiting will not help)
	exitTransport  = 121 // the executor or relay could not be reached, or the connection was lost
	exitSandbox    = 122 // the sandbox policy cannot be enforced on that executor
	exitOffline    = 123 // the executor is known to the relay but not connected now
	exitTimeout    = 124 // the command ran past --timeout and was stopped
	exitSpawn      = 126 // the executor could not start the command (not executable, a resource limit)
	exitNotFound   = 127 // the command was not found on the executor
)

// exitTable is the table above for the man page, in code order; a test
// holds it to the constants and to the README.
var exitTable = []struct {
	code    int
	meaning string
}{
	{exitUsage, "usage: a bad flag, URL, fingerprint, executor id or sandbox mode, found before anything is sent"},
	{exitRefused, "authentication or authorisation failed: the token is unknown, revoked, expired or used up, or may not reach that executor; this client's key was refused; an executor or relay key that is not the one pinned"},
	{exitCwdMissing, "the working directory does not exist on the executor, is no directory, or may not be entered"},
	{exitUnknown, "the relay has never had an executor by that id"},
	{exitTransport, "the executor or relay could not be reached, or the connection was lost and not resumed"},
	{exitSandbox, "the sandbox policy cannot be enforced on that executor"},
	{exitOffline, "the executor is known to the relay but offline now"},
	{exitTimeout, "the command ran past --timeout and was stopped"},
	{exitSpawn, "the executor could not start the command (not executable, a resource limit)"},
	{exitNotFound, "the command was not found on the executor"},
}

// dialExit is the exit status for a failure to reach the executor.
func dialExit(err error) int {
	var usage *usageError
	var urlErr *transport.URLError
	var pinned *identity.KeyMismatchError
	var relayKey *relayclient.KeyMismatchError
	switch {
	case errors.As(err, &usage), errors.As(err, &urlErr), errors.Is(err, protocol.ErrExecutorID):
		return exitUsage
	case errors.As(err, &pinned), errors.As(err, &relayKey), errors.Is(err, transport.ErrHandshakeRefused),
		errors.Is(err, client.ErrPinMismatch), errors.Is(err, client.ErrNotPinned):
		return exitRefused
	}
	var pe *protocol.Error
	isPE := errors.As(err, &pe)
	switch protocol.KindOf(err) {
	case protocol.KindRefused:
		return exitRefused
	case protocol.KindNotFound:
		return exitUnknown
	case protocol.KindUnavailable:
		if isPE && pe.Code == protocol.CodeNotFound {
			return exitOffline
		}
	}
	return exitTransport
}

// startExit is the exit status for a refused start, by the executor's
// error kind; no answer at all is a transport failure.
func startExit(err error) int {
	var pe *protocol.Error
	if !errors.As(err, &pe) {
		return exitTransport
	}
	if pe.Param() == protocol.ParamCwd {
		return exitCwdMissing
	}
	switch pe.Kind() {
	case protocol.KindUnsupported:
		return exitSandbox
	case protocol.KindNotFound:
		return exitNotFound
	case protocol.KindRefused:
		return exitRefused
	}
	return exitSpawn
}

// Client-side schemes: where --target and --relay may point.
var (
	targetSchemes = []string{transport.SchemeTCP, transport.SchemeUnix, transport.SchemeWS, transport.SchemeStdio}
	relaySchemes  = []string{transport.SchemeRelay, transport.SchemeRelayWS}
)

// check finds, before anything is sent, what would fail later with a less
// helpful message: a malformed or misplaced URL, an invalid executor id.
// Its errors are usage errors.
func (r remote) check() error {
	switch {
	case r.URL == "":
		return nil
	case r.Relay != "":
		_, err := transport.ParseURL(r.Relay, relaySchemes...)
		if err == nil {
			if err := protocol.CheckExecutorID(r.Executor); err != nil {
				return &usageError{fmt.Sprintf("--executor: %v", err)}
			}
			return nil
		}
		if _, terr := transport.ParseURL(r.Relay, targetSchemes...); terr == nil {
			return &usageError{fmt.Sprintf("--relay %s is an executor's own URL, not a relay's: give it with --target, or give the relay as outpost://HOST:PORT#<fingerprint>", r.Relay)}
		}
		return &usageError{"--relay: " + err.Error() + suggestScheme(r.Relay, relaySchemes)}
	}
	_, err := transport.ParseURL(r.URL, targetSchemes...)
	if err == nil {
		return nil
	}
	if _, rerr := transport.ParseURL(r.URL, relaySchemes...); rerr == nil {
		return &usageError{fmt.Sprintf("--target %s is a relay: give it with --relay, and the executor with --executor ID", r.URL)}
	}
	return &usageError{"--target: " + err.Error() + suggestScheme(r.URL, append(append([]string(nil), targetSchemes...), relaySchemes...))}
}

// suggestScheme is ` (did you mean outpost://?)` when url's scheme is a
// near miss of one of schemes (one edit or one transposition away), "".
func suggestScheme(url string, schemes []string) string {
	got, _, ok := strings.Cut(url, "://")
	if !ok {
		return ""
	}
	for _, s := range schemes {
		if got != s && nearMiss(strings.ToLower(got), s) {
			return fmt.Sprintf(" (did you mean %s://?)", s)
		}
	}
	return ""
}

// nearMiss: a and b differ by one substitution, insertion, deletion or
// transposition of adjacent characters.
func nearMiss(a, b string) bool {
	if a == b {
		return true
	}
	if len(a) == len(b) {
		var diff []int
		for i := range a {
			if a[i] != b[i] {
				diff = append(diff, i)
			}
		}
		switch len(diff) {
		case 1:
			return true
		case 2:
			i, j := diff[0], diff[1]
			return j == i+1 && a[i] == b[j] && a[j] == b[i]
		}
		return false
	}
	if len(a) > len(b) {
		a, b = b, a
	}
	if len(b)-len(a) != 1 {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return a[i:] == b[i+1:]
		}
	}
	return true
}
