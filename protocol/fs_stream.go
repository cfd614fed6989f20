package protocol

import (
	"encoding/json"
	"fmt"
)

// Streamed file writes as codex 0.171 has them (its fileWriteStreaming
// capability): fs/open with Mode FsOpenReplace truncates the file in place
// (creating a missing one) and returns a handle; fs/writeBlock writes at
// any offset of it (FsWriteBlockParams, result {}); fs/close releases it
// (result {}). Nothing is atomic: the file is empty from the open on and
// holds what was written so far when the handle is released any other way
// (a session that ends, a failed fs/readBlock). Outpost's own atomic
// streamed write is fs/create (FsCreateParams), which the same
// fs/writeBlock and fs/close serve.
//
// Errors of a replace open and its blocks keep codex's codes, which map
// its error kinds, not outpost's: a missing path -32004; a bad block, a
// bad handle id, a path that is not a regular file, EINVAL or EACCES
// -32600; any other I/O error (a directory: EISDIR) -32603, its message
// ending in codex's own text ("Is a directory (os error 21)"). A sandbox
// refusal is outpost's (-32600, KindPermission), as for every fs call.

// FsOpenMode is how fs/open opens a file. Empty is FsOpenRead.
type FsOpenMode string

const (
	// FsOpenRead opens an existing file for fs/readBlock (the default).
	FsOpenRead FsOpenMode = "read"
	// FsOpenReplace opens a file for fs/writeBlock, creating it when
	// missing and truncating it at once when present.
	FsOpenReplace FsOpenMode = "replace"
)

// Valid reports whether m is a mode fs/open knows.
func (m FsOpenMode) Valid() bool { return m == "" || m == FsOpenRead || m == FsOpenReplace }

// ErrUnknownOpenMode is the message for a mode fs/open does not know, in
// codex's words.
func ErrUnknownOpenMode(m string) string {
	return fmt.Sprintf("unknown variant `%s`, expected `%s` or `%s`", m, FsOpenRead, FsOpenReplace)
}

// UnmarshalJSON accepts a string naming a mode and refuses anything else
// (null included, as codex does), so a typo is never read as a read.
func (m *FsOpenMode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil || string(b) == "null" {
		return fmt.Errorf("mode: invalid type: %s, expected string", jsonKind(b))
	}
	if !FsOpenMode(s).Valid() || s == "" {
		return fmt.Errorf("mode: %s", ErrUnknownOpenMode(s))
	}
	*m = FsOpenMode(s)
	return nil
}

// jsonKind names the JSON type of a value for a message.
func jsonKind(b []byte) string {
	if len(b) == 0 {
		return "nothing"
	}
	switch b[0] {
	case 'n':
		return "null"
	case 't', 'f':
		return "boolean"
	case '{':
		return "map"
	case '[':
		return "sequence"
	case '"':
		return "string"
	}
	return "number"
}

const (
	// MaxWriteBlockBytes bounds the chunk of one fs/writeBlock on a
	// replace handle: 1 to MaxWriteBlockBytes decoded bytes (codex's
	// FILE_WRITE_CHUNK_SIZE). fs/create's handles keep their own bound.
	MaxWriteBlockBytes = 1 << 20
	// MaxStreamOpenHandles is codex's bound on a connection's open file
	// handles; outpost bounds a session's by its MaxFileHandles instead.
	MaxStreamOpenHandles = 128
)

// Codex's messages for a block it refuses, matched word for word (its
// clients and tests compare them).
const (
	ErrWriteBlockLength = "file write block length must be between 1 and 1048576"
	ErrWriteBlockRange  = "file write range exceeds the signed 64-bit file offset limit"
	ErrHandleIDTooLong  = "file handle ID must not exceed 32 bytes"
)
