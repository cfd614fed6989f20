package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"io/fs"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"

	"github.com/outpost-exec/outpost/client"
)

// files returns the executor's filesystem under the file tools' policy.
func (s *Server) files(ctx context.Context, executor string, write bool) (target, *client.Files, error) {
	t, err := s.reach(ctx, executor)
	if err != nil {
		return t, nil, err
	}
	pol, err := s.filePolicy(write, t.workspace)
	if err != nil {
		return t, nil, err
	}
	return t, t.env.Files(pol), nil
}

type readFileArgs struct {
	Path     string `json:"path" jsonschema:"the file, relative to the workspace or absolute"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"first byte to read; default 0"`
	Length   int    `json:"length,omitempty" jsonschema:"most bytes to read (default 262144, at most 524288)"`
	Encoding string `json:"encoding,omitempty" jsonschema:"text (default: a binary file is reported, not returned) or base64 (the bytes, whatever they are)"`
	Executor string `json:"executor,omitempty" jsonschema:"which executor; default the first configured"`
}

type readFileResult struct {
	Path      string `json:"path"`
	Content   string `json:"content" jsonschema:"the bytes read, as text (or base64 with encoding base64)"`
	Binary    bool   `json:"binary" jsonschema:"the bytes are not text; content is empty unless encoding is base64"`
	Size      int64  `json:"size" jsonschema:"the file's size"`
	Offset    int64  `json:"offset"`
	BytesRead int    `json:"bytes_read"`
	Truncated bool   `json:"truncated" jsonschema:"the file goes on past the bytes read; read again from offset+bytes_read"`
}

func (s *Server) readFile(ctx context.Context, req *mcp.CallToolRequest, in readFileArgs) (*mcp.CallToolResult, readFileResult, error) {
	limit := DefaultReadBytes
	switch {
	case in.Offset < 0:
		return nil, readFileResult{}, errorf(ErrInvalidArgument, "offset %d is negative", in.Offset)
	case in.Length < 0 || in.Length > MaxReadBytes:
		return nil, readFileResult{}, errorf(ErrInvalidArgument, "length %d: want 1 to %d", in.Length, MaxReadBytes)
	case in.Encoding != "" && in.Encoding != "text" && in.Encoding != "base64":
		return nil, readFileResult{}, errorf(ErrInvalidArgument, "encoding %q: want text or base64", in.Encoding)
	case in.Length > 0:
		limit = in.Length
	}
	t, f, err := s.files(ctx, in.Executor, false)
	if err != nil {
		return nil, readFileResult{}, err
	}
	p, err := resolvePath(t.workspace, in.Path)
	if err != nil {
		return nil, readFileResult{}, err
	}
	st, err := f.Stat(ctx, p)
	if err != nil {
		return nil, readFileResult{}, fmt.Errorf("read_file %s: %w", p, err)
	}
	if st.IsDir() {
		return nil, readFileResult{}, errorf(ErrInvalidArgument, "%s is a directory: use list_directory", p)
	}
	if in.Offset > st.Size() {
		in.Offset = st.Size()
	}
	r, err := f.OpenAt(ctx, p, in.Offset)
	if err != nil {
		return nil, readFileResult{}, fmt.Errorf("read_file %s: %w", p, err)
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, int64(limit)))
	if err != nil {
		return nil, readFileResult{}, fmt.Errorf("read_file %s: %w", p, err)
	}
	out := readFileResult{Path: p, Size: st.Size(), Offset: in.Offset, BytesRead: len(data), Truncated: in.Offset+int64(len(data)) < st.Size()}
	text := data
	if out.Truncated {
		text = trimRunes(data)
	}
	out.Binary = isBinary(text)
	switch {
	case in.Encoding == "base64":
		out.Content = base64.StdEncoding.EncodeToString(data)
	case out.Binary:
	default:
		out.Content = string(text)
		out.BytesRead = len(text)
		out.Truncated = in.Offset+int64(len(text)) < st.Size()
	}
	note(ctx, t.id, zap.String("path", p), zap.Int("bytes", out.BytesRead))
	msg := out.Content
	if out.Binary && in.Encoding != "base64" {
		msg = fmt.Sprintf("%s is binary (%d bytes); read it with encoding base64 to get its bytes", p, out.Size)
	} else if out.Truncated {
		msg += fmt.Sprintf("\n[%d of %d bytes from offset %d; read again with offset %d for more]", out.BytesRead, out.Size, out.Offset, out.Offset+int64(out.BytesRead))
	}
	return textResult(msg), out, nil
}

// errTooBig: a file grew past the bound after it was judged by its size.
var errTooBig = errorf(ErrInvalidArgument, "the file is larger than the bound")

// readAtMost reads a whole file of at most limit bytes, whatever its
// stat size said (a file that grows, or /proc's that say 0).
func readAtMost(ctx context.Context, f *client.Files, p string, limit int64) ([]byte, error) {
	r, err := f.Open(ctx, p)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w (%d bytes)", errTooBig, limit)
	}
	return data, nil
}

// isBinary: a NUL byte, or bytes that are not UTF-8.
func isBinary(b []byte) bool { return bytes.IndexByte(b, 0) >= 0 || !utf8.Valid(b) }

type writeFileArgs struct {
	Path       string `json:"path" jsonschema:"the file, relative to the workspace or absolute; replaced atomically"`
	Content    string `json:"content" jsonschema:"the file's new content"`
	CreateDirs bool   `json:"create_dirs,omitempty" jsonschema:"make missing parent directories"`
	Executor   string `json:"executor,omitempty" jsonschema:"which executor; default the first configured"`
}

type writeFileResult struct {
	Path         string `json:"path"`
	BytesWritten int    `json:"bytes_written"`
}

func (s *Server) writeFile(ctx context.Context, req *mcp.CallToolRequest, in writeFileArgs) (*mcp.CallToolResult, writeFileResult, error) {
	if len(in.Content) > MaxFileBytes {
		return nil, writeFileResult{}, errorf(ErrInvalidArgument, "content is %d bytes, at most %d", len(in.Content), MaxFileBytes)
	}
	t, f, err := s.files(ctx, in.Executor, true)
	if err != nil {
		note(ctx, t.id, zap.String("path", in.Path))
		return nil, writeFileResult{}, err
	}
	p, err := resolvePath(t.workspace, in.Path)
	if err != nil {
		return nil, writeFileResult{}, err
	}
	if in.CreateDirs {
		if err := f.MkdirAll(ctx, path.Dir(p)); err != nil {
			note(ctx, t.id, zap.String("path", p))
			return nil, writeFileResult{}, fmt.Errorf("write_file %s: %w", p, err)
		}
	}
	mode := fs.FileMode(0o644)
	if st, err := f.Stat(ctx, p); err == nil {
		mode = st.Mode().Perm()
	}
	if err := f.WriteFile(ctx, p, []byte(in.Content), mode); err != nil {
		note(ctx, t.id, zap.String("path", p))
		return nil, writeFileResult{}, fmt.Errorf("write_file %s: %w", p, err)
	}
	note(ctx, t.id, zap.String("path", p), zap.Int("bytes", len(in.Content)))
	return textResult(fmt.Sprintf("wrote %d bytes to %s", len(in.Content), p)), writeFileResult{Path: p, BytesWritten: len(in.Content)}, nil
}

type editFileArgs struct {
	Path                 string `json:"path" jsonschema:"the file, relative to the workspace or absolute"`
	OldString            string `json:"old_string" jsonschema:"the exact text to replace (whitespace and newlines included)"`
	NewString            string `json:"new_string" jsonschema:"the text to put in its place"`
	ExpectedReplacements int    `json:"expected_replacements,omitempty" jsonschema:"how many times old_string must occur (default 1); the file is left alone otherwise"`
	Executor             string `json:"executor,omitempty" jsonschema:"which executor; default the first configured"`
}

type editFileResult struct {
	Path         string `json:"path"`
	Replacements int    `json:"replacements"`
}

func (s *Server) editFile(ctx context.Context, req *mcp.CallToolRequest, in editFileArgs) (*mcp.CallToolResult, editFileResult, error) {
	want := in.ExpectedReplacements
	switch {
	case in.OldString == "":
		return nil, editFileResult{}, errorf(ErrInvalidArgument, "old_string is empty: use write_file to write a whole file")
	case want < 0:
		return nil, editFileResult{}, errorf(ErrInvalidArgument, "expected_replacements %d is negative", want)
	case want == 0:
		want = 1
	}
	t, f, err := s.files(ctx, in.Executor, true)
	if err != nil {
		note(ctx, t.id, zap.String("path", in.Path))
		return nil, editFileResult{}, err
	}
	p, err := resolvePath(t.workspace, in.Path)
	if err != nil {
		return nil, editFileResult{}, err
	}
	st, err := f.Stat(ctx, p)
	if err != nil {
		return nil, editFileResult{}, fmt.Errorf("edit_file %s: %w", p, err)
	}
	if st.IsDir() || st.Size() > MaxFileBytes {
		return nil, editFileResult{}, errorf(ErrInvalidArgument, "%s is a directory or larger than %d bytes", p, MaxFileBytes)
	}
	data, err := readAtMost(ctx, f, p, MaxFileBytes)
	if err != nil {
		return nil, editFileResult{}, fmt.Errorf("edit_file %s: %w", p, err)
	}
	if n := strings.Count(string(data), in.OldString); n != want {
		err := errorf(ErrEditMismatch, "old_string occurs %d times in %s, not %d: nothing was changed (quote more context to make it unique, or set expected_replacements)", n, p, want)
		note(ctx, t.id, zap.String("path", p))
		return nil, editFileResult{}, err
	}
	// The size is known before the edit is built: an edit that would
	// pass the bound allocates nothing.
	if size := int64(len(data)) + int64(want)*(int64(len(in.NewString))-int64(len(in.OldString))); size > MaxFileBytes {
		return nil, editFileResult{}, errorf(ErrInvalidArgument, "the edited file would be %d bytes, at most %d", size, MaxFileBytes)
	}
	edited := strings.ReplaceAll(string(data), in.OldString, in.NewString)
	if err := f.WriteFile(ctx, p, []byte(edited), st.Mode().Perm()); err != nil {
		note(ctx, t.id, zap.String("path", p))
		return nil, editFileResult{}, fmt.Errorf("edit_file %s: %w", p, err)
	}
	note(ctx, t.id, zap.String("path", p), zap.Int("replacements", want))
	return textResult(fmt.Sprintf("replaced %d occurrence(s) in %s", want, p)), editFileResult{Path: p, Replacements: want}, nil
}

type listDirArgs struct {
	Path     string `json:"path,omitempty" jsonschema:"the directory, relative to the workspace or absolute; default the workspace"`
	Executor string `json:"executor,omitempty" jsonschema:"which executor; default the first configured"`
}

type dirEntry struct {
	Name string `json:"name"`
	Type string `json:"type" jsonschema:"file, dir, symlink or other"`
	Size int64  `json:"size,omitempty"`
}

type listDirResult struct {
	Path      string     `json:"path"`
	Entries   []dirEntry `json:"entries"`
	Truncated bool       `json:"truncated,omitempty" jsonschema:"the directory has more entries than the listing's bound"`
}

// maxDirEntries bounds one listing.
const maxDirEntries = 10000

func (s *Server) listDirectory(ctx context.Context, req *mcp.CallToolRequest, in listDirArgs) (*mcp.CallToolResult, listDirResult, error) {
	t, f, err := s.files(ctx, in.Executor, false)
	if err != nil {
		return nil, listDirResult{}, err
	}
	p, err := resolvePath(t.workspace, in.Path)
	if err != nil {
		return nil, listDirResult{}, err
	}
	ents, err := f.ReadDir(ctx, p)
	if err != nil {
		return nil, listDirResult{}, fmt.Errorf("list_directory %s: %w", p, err)
	}
	out := listDirResult{Path: p, Entries: []dirEntry{}}
	if len(ents) > maxDirEntries {
		ents, out.Truncated = ents[:maxDirEntries], true
	}
	var b strings.Builder
	for _, e := range ents {
		de := dirEntry{Name: e.Name(), Type: entryType(e.Type())}
		if info, err := e.Info(); err == nil && de.Type == "file" {
			de.Size = info.Size()
		}
		out.Entries = append(out.Entries, de)
		suffix := ""
		if de.Type == "dir" {
			suffix = "/"
		}
		fmt.Fprintf(&b, "%s%s\t%s\t%d\n", de.Name, suffix, de.Type, de.Size)
	}
	if out.Truncated {
		fmt.Fprintf(&b, "[only the first %d entries]\n", maxDirEntries)
	}
	note(ctx, t.id, zap.String("path", p), zap.Int("entries", len(out.Entries)))
	return textResult(b.String()), out, nil
}

func entryType(m fs.FileMode) string {
	switch {
	case m.IsDir():
		return "dir"
	case m&fs.ModeSymlink != 0:
		return "symlink"
	case m.IsRegular():
		return "file"
	}
	return "other"
}
