package protocol

import (
	"errors"
	"fmt"
)

// Kind says what an error means, so a caller can decide what to do
// without reading its message. It travels in the error object's data as
// {"kind": "..."} (JSON) and the same map in msgpack; codex peers ignore
// data. An error without a kind, or with a kind this list does not hold,
// has Kind "": the caller decides by its code alone, as before kinds.
//
// A kind does not replace the code: codes stay what codex sends (and what
// older outpost peers expect), and one kind travels with several codes.
type Kind string

// The kinds, a closed set.
const (
	// KindNotFound: what the request names does not exist (a path, a
	// program, a process, a handle).
	KindNotFound Kind = "not_found"
	// KindPermission: a policy or the file system's permissions deny it
	// (a sandbox policy, EACCES, a read-only file system).
	KindPermission Kind = "permission"
	// KindInvalid: the request is malformed or makes no sense in the
	// current state (bad params, a directory where a file is needed, a
	// call before initialize). Repeating it changes nothing.
	KindInvalid Kind = "invalid"
	// KindTooLarge: the request or its answer exceeds a size bound (a
	// whole-file call past its limit, a tree or listing past its bound).
	KindTooLarge Kind = "too_large"
	// KindExhausted: a limit on shared resources is reached (too many
	// processes, sessions or handles; a full relay; a disk full). It may
	// succeed later.
	KindExhausted Kind = "exhausted"
	// KindUnavailable: not now, try again later (shutting down, an
	// executor offline, a session still attached elsewhere, connect again).
	KindUnavailable Kind = "unavailable"
	// KindUnknownSession: the session to resume does not exist (it expired,
	// or the executor restarted). Its processes are gone.
	KindUnknownSession Kind = "unknown_session"
	// KindRefused: the caller is not authorised (a bad or used-up token, a
	// client ACL, a revoked key, an id bound to another key or already
	// joined). Retrying with the same credentials does not help.
	KindRefused Kind = "refused"
	// KindUnsupported: this executor cannot do what is asked (a sandbox
	// policy it cannot enforce, managed networking).
	KindUnsupported Kind = "unsupported"
	// KindInternal: anything else (an I/O failure, a bug).
	KindInternal Kind = "internal"
)

// Kinds lists every kind.
var Kinds = []Kind{KindNotFound, KindPermission, KindInvalid, KindTooLarge, KindExhausted,
	KindUnavailable, KindUnknownSession, KindRefused, KindUnsupported, KindInternal}

// Known reports whether k is one of Kinds.
func (k Kind) Known() bool {
	for _, known := range Kinds {
		if k == known {
			return true
		}
	}
	return false
}

// Temporary reports whether the same request may succeed later unchanged:
// KindExhausted and KindUnavailable.
func (k Kind) Temporary() bool { return k == KindExhausted || k == KindUnavailable }

// ErrorData is the data member of outpost's error objects.
type ErrorData struct {
	Kind Kind `json:"kind" msgpack:"kind"`
	// Param names the request parameter at fault, when the kind alone
	// does not say which ("cwd": the working directory, not the program,
	// is not found).
	Param string `json:"param,omitempty" msgpack:"param,omitempty"`
}

// Parameters an error's data may name.
const (
	ParamCwd = "cwd"
)

// WithParam sets the parameter at fault (see ErrorData.Param) on an error
// made by KindErrorf with a kind, and returns e.
func (e *Error) WithParam(param string) *Error {
	if d, ok := e.Data.(ErrorData); ok {
		d.Param = param
		e.Data = d
	}
	return e
}

// Param is the parameter at fault that e's data names, "" if none.
func (e *Error) Param() string {
	if e == nil {
		return ""
	}
	switch d := e.Data.(type) {
	case ErrorData:
		return d.Param
	case *ErrorData:
		if d != nil {
			return d.Param
		}
	case map[string]any:
		s, _ := d["param"].(string)
		return s
	case map[any]any:
		s, _ := d["param"].(string)
		return s
	}
	return ""
}

// ParamOf is the parameter at fault named by the *Error in err's chain,
// "" if there is none.
func ParamOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Param()
	}
	return ""
}

// KindErrorf builds an *Error of the given kind with code (a codex code,
// or one of outpost's own). It is how outpost makes every error it sends;
// KindOf reads the kind back on the other side.
func KindErrorf(kind Kind, code int, format string, args ...any) *Error {
	e := &Error{Code: code, Message: fmt.Sprintf(format, args...)}
	if kind != "" {
		e.Data = ErrorData{Kind: kind}
	}
	return e
}

// Kind is e's kind, "" if it has none or one this version does not know.
// It understands data as built by KindErrorf and as decoded from JSON or
// msgpack (a map with a string "kind").
func (e *Error) Kind() Kind {
	if e == nil {
		return ""
	}
	var k Kind
	switch d := e.Data.(type) {
	case ErrorData:
		k = d.Kind
	case *ErrorData:
		if d != nil {
			k = d.Kind
		}
	case map[string]any:
		s, _ := d["kind"].(string)
		k = Kind(s)
	case map[any]any:
		s, _ := d["kind"].(string)
		k = Kind(s)
	}
	if !k.Known() {
		return ""
	}
	return k
}

// KindOf is the kind of the *Error in err's chain, "" if there is none or
// it has no (known) kind.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind()
	}
	return ""
}
