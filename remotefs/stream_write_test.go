//go:build linux || darwin || freebsd

package remotefs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/outpost-exec/outpost/protocol"
)

// replaceOpen opens path (a native path) for a codex streamed write.
func replaceOpen(s *Session, id, path string, sandbox any) error {
	_, err := s.Open(protocol.FsOpenParams{HandleID: id, Path: "file://" + path, Mode: protocol.FsOpenReplace, Sandbox: sandbox})
	return err
}

func writeBlock(s *Session, id string, off uint64, chunk []byte) error {
	_, err := s.WriteBlock(protocol.FsWriteBlockParams{HandleID: id, Offset: off, Chunk: chunk})
	return err
}

func mustRead(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// errMessage is err's message ("" for nil).
func errMessage(err error) string {
	var pe *protocol.Error
	if errors.As(err, &pe) {
		return pe.Message
	}
	return fmt.Sprint(err)
}

// dirNames lists dir's entries, to see that nothing was left beside a file.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// As codex's server: the open empties the file before it answers, blocks
// land at their offsets in any order (a gap reads as zeros), the file
// keeps its inode and mode, and no other entry ever appears beside it.
func TestReplaceTruncatesAtOpenAndWritesBlocksInPlace(t *testing.T) {
	s := fsTestSession(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "blocks.bin")
	os.WriteFile(p, []byte("original contents"), 0o600)
	before, _ := os.Stat(p)
	if err := replaceOpen(s, "writer", p, nil); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); got != "" {
		t.Fatalf("after the open the file holds %q, want it empty", got)
	}
	const block = protocol.MaxWriteBlockBytes
	for _, b := range []struct {
		off   uint64
		chunk []byte
	}{{block, []byte("zzz")}, {0, bytes.Repeat([]byte("a"), block)}, {1, []byte("bc")}} {
		if err := writeBlock(s, "writer", b.off, b.chunk); err != nil {
			t.Fatalf("block at %d: %v", b.off, err)
		}
	}
	want := bytes.Repeat([]byte("a"), block)
	copy(want[1:], "bc")
	want = append(want, "zzz"...)
	if got := mustRead(t, p); got != string(want) {
		t.Fatalf("before close: %d bytes, want %d", len(got), len(want))
	}
	res, err := s.Close(protocol.FsCloseParams{HandleID: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := json.Marshal(res); string(b) != "{}" {
		t.Errorf("fs/close result %s, want {} as codex", b)
	}
	after, _ := os.Stat(p)
	if !os.SameFile(before, after) || after.Mode().Perm() != 0o600 {
		t.Errorf("the file was replaced (same inode %v, mode %v), not written in place", os.SameFile(before, after), after.Mode().Perm())
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("entries beside the file: %v", names)
	}

	// A gap reads as zeros; a missing file is created 0666 less the umask.
	q := filepath.Join(dir, "new.bin")
	if err := replaceOpen(s, "w2", q, nil); err != nil {
		t.Fatal(err)
	}
	writeBlock(s, "w2", 4, []byte("XYZ"))
	if got := mustRead(t, q); got != "\x00\x00\x00\x00XYZ" {
		t.Errorf("gap: %q", got)
	}
	if fi, _ := os.Stat(q); fi.Mode().Perm() != 0o666&^processUmask(t) {
		t.Errorf("created with mode %v", fi.Mode().Perm())
	}
}

func processUmask(t *testing.T) os.FileMode {
	t.Helper()
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err == nil {
				return os.FileMode(m)
			}
		}
	}
	t.Skip("no umask in /proc/self/status")
	return 0
}

// codex's bounds on a block, in its order (the block before the handle)
// and words; a refused block changes nothing.
func TestReplaceBlockBounds(t *testing.T) {
	if protocol.ErrWriteBlockLength != fmt.Sprintf("file write block length must be between 1 and %d", protocol.MaxWriteBlockBytes) {
		t.Fatalf("the message and the bound disagree: %q", protocol.ErrWriteBlockLength)
	}
	s := fsTestSession(t)
	p := filepath.Join(t.TempDir(), "offsets.bin")
	if err := replaceOpen(s, "w", p, nil); err != nil {
		t.Fatal(err)
	}
	if err := writeBlock(s, "w", 0, []byte("original")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		id     string
		off    uint64
		n      int
		code   int
		kind   protocol.Kind
		prefix string
	}{
		{"empty", "w", 0, 0, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockLength},
		{"one byte too large", "w", 0, protocol.MaxWriteBlockBytes + 1, protocol.CodeInvalidRequest, protocol.KindTooLarge, protocol.ErrWriteBlockLength},
		{"unsigned overflow", "w", math.MaxUint64, 1, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockRange},
		{"windows sentinel", "w", math.MaxUint64 - 1, 1, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockRange},
		{"signed end overflow", "w", math.MaxInt64, 1, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockRange},
		{"crosses the signed limit", "w", math.MaxInt64 - 1, 2, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockRange},
		{"empty, unknown handle", "nope", 0, 0, protocol.CodeInvalidRequest, protocol.KindInvalid, protocol.ErrWriteBlockLength},
		{"unknown handle", "nope", 0, 1, protocol.CodeNotFound, protocol.KindNotFound, "fs/writeBlock: unknown handle nope"},
		// Below the signed limit the block reaches the file system, which
		// refuses it (EFBIG) as codex's does.
		{"past the file system's largest file", "w", math.MaxInt64 - 1, 1, protocol.CodeInternal, protocol.KindTooLarge, "fs/writeBlock: handle w: File too large (os error 27)"},
	} {
		err := writeBlock(s, c.id, c.off, make([]byte, c.n))
		if fsCode(t, err) != c.code || protocol.KindOf(err) != c.kind || !strings.HasPrefix(errMessage(err), c.prefix) {
			t.Errorf("%s: %v (kind %s), want %d %s %q", c.name, err, protocol.KindOf(err), c.code, c.kind, c.prefix)
		}
	}
	if _, err := s.Close(protocol.FsCloseParams{HandleID: "w"}); err != nil {
		t.Fatal(err)
	}
	if got := mustRead(t, p); got != "original" {
		t.Errorf("refused blocks changed the file: %q", got)
	}
}

// A replace handle cannot be read: the read fails as codex's does (its
// descriptor is write-only, -32603) and, as after any failed read there,
// the handle is closed; the file keeps what was written. A read handle
// refuses writes the same way and stays open.
func TestReplaceAndReadHandlesRefuseTheOtherDirection(t *testing.T) {
	s := fsTestSession(t)
	dir := t.TempDir()
	p := filepath.Join(dir, "w.txt")
	if err := replaceOpen(s, "w", p, nil); err != nil {
		t.Fatal(err)
	}
	writeBlock(s, "w", 0, []byte("kept"))
	if _, err := s.ReadBlock(protocol.FsReadBlockParams{HandleID: "w", Len: 0}); fsCode(t, err) != protocol.CodeInvalidRequest {
		t.Errorf("a zero-length read: %v", err)
	}
	if err := writeBlock(s, "w", 4, []byte("!")); err != nil {
		t.Errorf("a refused length closed the handle: %v", err)
	}
	if _, err := s.ReadBlock(protocol.FsReadBlockParams{HandleID: "w", Len: 4}); fsCode(t, err) != protocol.CodeInternal || !strings.Contains(errMessage(err), "Bad file descriptor (os error 9)") {
		t.Errorf("a read of a replace handle: %v", err)
	}
	if err := writeBlock(s, "w", 0, []byte("x")); fsCode(t, err) != protocol.CodeNotFound {
		t.Errorf("the handle is still open after the failed read: %v", err)
	}
	if got := mustRead(t, p); got != "kept!" {
		t.Errorf("file %q", got)
	}

	r := filepath.Join(dir, "r.txt")
	os.WriteFile(r, []byte("read me"), 0o644)
	if _, err := s.Open(protocol.FsOpenParams{HandleID: "r", Path: "file://" + r}); err != nil {
		t.Fatal(err)
	}
	if err := writeBlock(s, "r", 0, []byte("X")); fsCode(t, err) != protocol.CodeInternal {
		t.Errorf("a write to a read handle: %v", err)
	}
	if res, err := s.ReadBlock(protocol.FsReadBlockParams{HandleID: "r", Len: 4}); err != nil || string(res.(protocol.FsReadBlockResult).Chunk) != "read" {
		t.Errorf("the read handle after a refused write: %v %v", res, err)
	}
	if got := mustRead(t, r); got != "read me" {
		t.Errorf("a read handle wrote: %q", got)
	}
}

// A duplicate id or a full table is refused before the file is touched:
// an existing file keeps its contents, a missing one is not created.
func TestReplaceIsAdmittedBeforeTheFileIsTouched(t *testing.T) {
	cfg := fsTestConfig(t)
	cfg.MaxFileHandles = 2
	s := NewSession(cfg, "admission")
	defer s.End()
	dir := t.TempDir()
	existing, missing := filepath.Join(dir, "existing"), filepath.Join(dir, "missing")
	os.WriteFile(existing, []byte("original"), 0o644)
	if _, err := s.Open(protocol.FsOpenParams{HandleID: "0", Path: "file://" + existing}); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{existing, missing} {
		err := replaceOpen(s, "0", p, nil)
		if fsCode(t, err) != protocol.CodeInvalidRequest || errMessage(err) != "file handle `0` already exists" {
			t.Errorf("duplicate id on %s: %v", p, err)
		}
	}
	if err := replaceOpen(s, "1", filepath.Join(dir, "third"), nil); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{existing, missing} {
		if err := replaceOpen(s, "2", p, nil); fsCode(t, err) != protocol.CodeInvalidRequest || protocol.KindOf(err) != protocol.KindExhausted {
			t.Errorf("past the bound of %d handles on %s: %v", cfg.MaxFileHandles, p, err)
		}
	}
	if got := mustRead(t, existing); got != "original" || fsExists(missing) {
		t.Errorf("a refused open touched the files: %q, missing exists %v", got, fsExists(missing))
	}
	// Closing frees the slot.
	s.Close(protocol.FsCloseParams{HandleID: "1"})
	if err := replaceOpen(s, "2", missing, nil); err != nil {
		t.Errorf("after a close: %v", err)
	}
	// codex's bound on a handle id: 32 bytes, the empty id allowed.
	if err := replaceOpen(s, strings.Repeat("x", 33), missing, nil); fsCode(t, err) != protocol.CodeInvalidRequest || errMessage(err) != protocol.ErrHandleIDTooLong {
		t.Errorf("a 33-byte id: %v", err)
	}
}

// What is not a regular file is never opened for writing: a directory
// fails as the open would (EISDIR), a fifo (even one without a reader,
// which must not block the call) or a device is "not a file".
func TestReplaceRefusesWhatIsNotARegularFile(t *testing.T) {
	s := fsTestSession(t)
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "file"), []byte("f"), 0o644)
	for _, c := range []struct {
		path string
		code int
		text string
	}{
		{dir, protocol.CodeInternal, "Is a directory (os error 21)"},
		{"/", protocol.CodeInternal, "Is a directory (os error 21)"},
		{fifo, protocol.CodeInvalidRequest, "path `" + fifo + "` is not a file"},
		{"/dev/null", protocol.CodeInvalidRequest, "path `/dev/null` is not a file"},
		{filepath.Join(dir, "file", "x"), protocol.CodeInternal, "Not a directory (os error 20)"},
		{filepath.Join(dir, "nodir", "x"), protocol.CodeNotFound, "No such file or directory (os error 2)"},
	} {
		done := make(chan error, 1)
		go func() { done <- replaceOpen(s, "h", c.path, nil) }()
		select {
		case err := <-done:
			if fsCode(t, err) != c.code || !strings.HasSuffix(errMessage(err), c.text) {
				t.Errorf("%s: %v, want %d ...%s", c.path, err, c.code, c.text)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the open blocked", c.path)
		}
	}
	if names := dirNames(t, dir); len(names) != 2 {
		t.Errorf("entries made: %v", names)
	}
}

// The sandbox judges a replace as a write, by where the path really
// leads: a read-only policy, a protected name, a "none" path and a
// symlink out of the workspace are refused and leave every file as it
// was; a symlink inside is written through to its target.
func TestReplaceIsJudgedAsAWriteByWhereItLeads(t *testing.T) {
	s := fsTestSession(t)
	base := fsPrivateDir(t)
	ws, out := filepath.Join(base, "ws"), filepath.Join(base, "out")
	os.MkdirAll(filepath.Join(ws, ".git"), 0o755)
	os.MkdirAll(filepath.Join(ws, "sub"), 0o755)
	os.Mkdir(out, 0o755)
	fsMustWrite(t, filepath.Join(ws, ".git", "config"), "cfg")
	fsMustWrite(t, filepath.Join(ws, "in.txt"), "in")
	fsMustWrite(t, filepath.Join(ws, "secret"), "sec")
	fsMustWrite(t, filepath.Join(out, "o.txt"), "out")
	fsMustWrite(t, filepath.Join(ws, "target.txt"), "target")
	os.Symlink(filepath.Join(out, "o.txt"), filepath.Join(ws, "to-out"))
	os.Symlink(".git/config", filepath.Join(ws, "to-git"))
	os.Symlink("target.txt", filepath.Join(ws, "to-target"))
	os.Symlink("made-by-link.txt", filepath.Join(ws, "dangling"))
	os.Symlink(out, filepath.Join(ws, "out-dir"))

	workspace := fsWorkspace(ws)
	readOnly := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}}, "cwd": ws}
	withNone := map[string]any{"entries": []map[string]any{{"path": ":root", "access": "read"}, {"path": ":cwd", "access": "write"},
		{"path": filepath.Join(ws, "secret"), "access": "none"}}, "cwd": ws}
	before := fsSnapshot(t, base)
	for _, c := range []struct {
		name, path string
		policy     map[string]any
	}{
		{"read-only policy", filepath.Join(ws, "in.txt"), readOnly},
		{"read-only policy, new file", filepath.Join(ws, "new.txt"), readOnly},
		{"protected name", filepath.Join(ws, ".git", "config"), workspace},
		{"new file in a protected name", filepath.Join(ws, ".git", "new"), workspace},
		{"protected name deeper", filepath.Join(ws, "sub", ".git", "x"), workspace},
		{"outside", filepath.Join(out, "o.txt"), workspace},
		{"missing parent outside", filepath.Join(out, "nodir", "x"), workspace},
		{"symlink out", filepath.Join(ws, "to-out"), workspace},
		{"symlink to a protected name", filepath.Join(ws, "to-git"), workspace},
		{"through a symlinked directory out", filepath.Join(ws, "out-dir", "o.txt"), workspace},
		{"a none path", filepath.Join(ws, "secret"), withNone},
	} {
		err := replaceOpen(s, "h", c.path, c.policy)
		if fsCode(t, err) != protocol.CodeInvalidRequest || protocol.KindOf(err) != protocol.KindPermission {
			t.Errorf("%s: %v, want a refusal", c.name, err)
		}
		if err == nil {
			s.Close(protocol.FsCloseParams{HandleID: "h"})
		}
	}
	if diff := fsSnapshotDiff(before, fsSnapshot(t, base)); len(diff) > 0 {
		t.Fatalf("refused opens changed the tree: %v", diff)
	}
	for _, c := range []struct{ link, target, want string }{
		{"to-target", "target.txt", "through"},
		{"dangling", "made-by-link.txt", "through"},
		{"in.txt", "in.txt", "through"},
	} {
		if err := replaceOpen(s, "h", filepath.Join(ws, c.link), workspace); err != nil {
			t.Fatalf("%s: %v", c.link, err)
		}
		writeBlock(s, "h", 0, []byte(c.want))
		s.Close(protocol.FsCloseParams{HandleID: "h"})
		if got := mustRead(t, filepath.Join(ws, c.target)); got != c.want {
			t.Errorf("%s: target holds %q", c.link, got)
		}
	}
	if fi, err := os.Lstat(filepath.Join(ws, "to-target")); err != nil || fi.Mode()&os.ModeSymlink == 0 {
		t.Errorf("the link was replaced: %v %v", fi, err)
	}
}

// A session that ends with a replace handle open leaves the file as
// written so far (codex's in-place semantics: there is no temporary file
// to discard) and takes no further handles.
func TestSessionEndReleasesReplaceHandles(t *testing.T) {
	s := NewSession(fsTestConfig(t), "ending")
	dir := t.TempDir()
	p := filepath.Join(dir, "partial")
	os.WriteFile(p, []byte("old contents"), 0o644)
	if err := replaceOpen(s, "w", p, nil); err != nil {
		t.Fatal(err)
	}
	writeBlock(s, "w", 0, []byte("half"))
	s.End()
	if got := mustRead(t, p); got != "half" {
		t.Errorf("after the session ended: %q", got)
	}
	if names := dirNames(t, dir); len(names) != 1 {
		t.Errorf("entries left: %v", names)
	}
	if err := replaceOpen(s, "w2", p, nil); protocol.KindOf(err) != protocol.KindUnknownSession || mustRead(t, p) != "half" {
		t.Errorf("an open after the end: %v", err)
	}
	if err := writeBlock(s, "w", 0, []byte("x")); fsCode(t, err) != protocol.CodeNotFound {
		t.Errorf("a block after the end: %v", err)
	}
}

// The mode is a closed set: codex's words for one it does not know, and
// null or a number are refused rather than read as "read".
func TestOpenModeIsAClosedSet(t *testing.T) {
	for in, want := range map[string]string{
		`{"mode":"read"}`:    "",
		`{"mode":"replace"}`: "",
		`{}`:                 "",
		`{"mode":"write"}`:   "unknown variant `write`, expected `read` or `replace`",
		`{"mode":""}`:        "unknown variant ``, expected `read` or `replace`",
		`{"mode":null}`:      "invalid type: null",
		`{"mode":7}`:         "invalid type: number",
	} {
		var p protocol.FsOpenParams
		err := json.Unmarshal([]byte(in), &p)
		if want == "" && err != nil || want != "" && (err == nil || !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", in, err, want)
		}
	}
	s := fsTestSession(t)
	p := filepath.Join(t.TempDir(), "f")
	if _, err := s.Open(protocol.FsOpenParams{HandleID: "h", Path: "file://" + p, Mode: "append"}); fsCode(t, err) != protocol.CodeInvalidParams || fsExists(p) {
		t.Errorf("an unknown mode: %v (created %v)", err, fsExists(p))
	}
}

// Blocks written concurrently to one handle, with a close and the end of
// the session racing the last of them, neither corrupt the file nor race
// (run with -race): every block that was acknowledged is in the file.
func TestReplaceBlocksRaceCloseAndEnd(t *testing.T) {
	for round := 0; round < 20; round++ {
		s := NewSession(fsTestConfig(t), "racing")
		p := filepath.Join(t.TempDir(), "f")
		if err := replaceOpen(s, "w", p, nil); err != nil {
			t.Fatal(err)
		}
		const blocks, size = 16, 4096
		acked := make(chan int, blocks)
		done := make(chan struct{})
		for i := 0; i < blocks; i++ {
			go func() {
				defer func() { done <- struct{}{} }()
				if writeBlock(s, "w", uint64(i*size), bytes.Repeat([]byte{byte('a' + i)}, size)) == nil {
					acked <- i
				}
			}()
		}
		if round%2 == 0 {
			s.Close(protocol.FsCloseParams{HandleID: "w"})
		}
		s.End()
		for i := 0; i < blocks; i++ {
			<-done
		}
		close(acked)
		data := mustRead(t, p)
		for i := range acked {
			if len(data) < (i+1)*size || data[i*size:(i+1)*size] != strings.Repeat(string(rune('a'+i)), size) {
				t.Fatalf("round %d: acknowledged block %d is not in the file", round, i)
			}
		}
	}
}
