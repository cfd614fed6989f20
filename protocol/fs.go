package protocol

// Remote files: codex's fs/* methods (names and fields as codex has them)
// and outpost's additions for streamed writes and checksums. Paths are
// file: URIs or absolute paths on the executor, through its prefix
// mappings. Sandbox, when present, is the same policy object as
// process/start's (plus an optional "cwd" for its :cwd symbol), and every
// call honours it: a read-only policy cannot write, protected sub-paths
// stay read-only, "none" paths cannot be read, and symlinks are judged by
// where they lead.
//
// Errors: a missing path is CodeNotFound (-32004); a denied, invalid or
// too large request CodeInvalidRequest (-32600); anything else
// CodeInternal (-32603). Messages name the path. The kind tells what the
// code cannot: KindNotFound, KindPermission (a policy or the file
// system's permissions), KindInvalid, KindTooLarge, KindExhausted (too
// many handles, a full disk), KindInternal.
const (
	MethodFsReadFile        = "fs/readFile"
	MethodFsWriteFile       = "fs/writeFile"
	MethodFsCreateDirectory = "fs/createDirectory"
	MethodFsGetMetadata     = "fs/getMetadata"
	MethodFsCanonicalize    = "fs/canonicalize"
	MethodFsReadDirectory   = "fs/readDirectory"
	MethodFsRemove          = "fs/remove"
	MethodFsCopy            = "fs/copy"
	MethodFsOpen            = "fs/open"
	MethodFsReadBlock       = "fs/readBlock"
	MethodFsClose           = "fs/close"

	// MethodFsCreate opens a file for a streamed write (outpost addition):
	// blocks go to a temporary file beside it, which fs/close moves into
	// place atomically; a handle closed with the session is discarded.
	MethodFsCreate = "fs/create"
	// MethodFsWriteBlock writes one block at an offset of a file opened
	// by fs/create, or by fs/open in mode "replace" (codex 0.171, see
	// fs_stream.go).
	MethodFsWriteBlock = "fs/writeBlock"
	// MethodFsHash returns a file's digest and size (outpost addition),
	// for end-to-end checks of a transfer.
	MethodFsHash = "fs/hash"
	// MethodFsCreateSymlink makes a symlink holding a given target text
	// (outpost addition), for copies that keep symlinks as symlinks.
	MethodFsCreateSymlink = "fs/createSymlink"
)

// MaxHandleIDBytes bounds a client-chosen file handle id (codex: 32).
const MaxHandleIDBytes = 32

// FsPathParams name one path.
type FsPathParams struct {
	Path    string `json:"path" msgpack:"path"`
	Sandbox any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
}

// FsReadFileParams read a whole file.
type FsReadFileParams struct {
	Path    string `json:"path" msgpack:"path"`
	Sandbox any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// MaxBytes lowers the executor's whole-file limit for this call.
	MaxBytes *uint64 `json:"maxBytes,omitempty" msgpack:"maxBytes,omitempty"`
}

// FsReadFileResult carries the file.
type FsReadFileResult struct {
	Data []byte `json:"dataBase64" msgpack:"dataBase64"`
}

// FsWriteFileParams replace a whole file (atomically: a temporary file
// beside it is renamed over it).
type FsWriteFileParams struct {
	Path    string `json:"path" msgpack:"path"`
	Data    []byte `json:"dataBase64" msgpack:"dataBase64"`
	Sandbox any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// Mode sets the permission bits (outpost addition; default 0644, or
	// the existing file's).
	Mode *uint32 `json:"mode,omitempty" msgpack:"mode,omitempty"`
}

// FsCreateDirectoryParams make a directory (and, by default, its parents).
type FsCreateDirectoryParams struct {
	Path      string `json:"path" msgpack:"path"`
	Recursive *bool  `json:"recursive,omitempty" msgpack:"recursive,omitempty"`
	Sandbox   any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// NoFollow (outpost addition): no component of Path may be a symlink
	// (the call fails instead of following one), so a copy into a tree
	// cannot be led out of it by a link planted there.
	NoFollow bool `json:"noFollow,omitempty" msgpack:"noFollow,omitempty"`
	// Mode (outpost addition) sets the permission bits of the directory
	// Path names when this call creates it, exactly (the umask does not
	// apply); missing parents get 0755, an existing directory is left as
	// it is. Default 0755 less the umask.
	Mode *uint32 `json:"mode,omitempty" msgpack:"mode,omitempty"`
}

// FsMetadata describes a path (without following a final symlink).
type FsMetadata struct {
	IsDirectory  bool   `json:"isDirectory" msgpack:"isDirectory"`
	IsFile       bool   `json:"isFile" msgpack:"isFile"`
	IsSymlink    bool   `json:"isSymlink" msgpack:"isSymlink"`
	Size         uint64 `json:"size" msgpack:"size"`
	CreatedAtMs  int64  `json:"createdAtMs" msgpack:"createdAtMs"`
	ModifiedAtMs int64  `json:"modifiedAtMs" msgpack:"modifiedAtMs"`
	// Mode is the permission bits (outpost addition).
	Mode uint32 `json:"mode,omitempty" msgpack:"mode,omitempty"`
	// SymlinkTarget is a symlink's text, unresolved (outpost addition).
	SymlinkTarget string `json:"symlinkTarget,omitempty" msgpack:"symlinkTarget,omitempty"`
}

// FsCanonicalizeResult is the path with every symlink resolved.
type FsCanonicalizeResult struct {
	Path string `json:"path" msgpack:"path"`
}

// FsDirEntry is one entry of a directory.
type FsDirEntry struct {
	FileName    string `json:"fileName" msgpack:"fileName"`
	IsDirectory bool   `json:"isDirectory" msgpack:"isDirectory"`
	IsFile      bool   `json:"isFile" msgpack:"isFile"`
	// IsSymlink (outpost addition).
	IsSymlink bool `json:"isSymlink,omitempty" msgpack:"isSymlink,omitempty"`
}

// FsReadDirectoryResult lists a directory, sorted by name.
type FsReadDirectoryResult struct {
	Entries []FsDirEntry `json:"entries" msgpack:"entries"`
}

// FsRemoveParams remove a path (recursively and ignoring a missing path by
// default, as codex).
type FsRemoveParams struct {
	Path      string `json:"path" msgpack:"path"`
	Recursive *bool  `json:"recursive,omitempty" msgpack:"recursive,omitempty"`
	Force     *bool  `json:"force,omitempty" msgpack:"force,omitempty"`
	Sandbox   any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
}

// FsCopyParams copy a file, or a directory tree with Recursive.
type FsCopyParams struct {
	SourcePath      string `json:"sourcePath" msgpack:"sourcePath"`
	DestinationPath string `json:"destinationPath" msgpack:"destinationPath"`
	Recursive       bool   `json:"recursive" msgpack:"recursive"`
	Sandbox         any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// NoFollow applies to DestinationPath (see FsCreateParams); inside a
	// tree fs/copy follows nothing anyway.
	NoFollow bool `json:"noFollow,omitempty" msgpack:"noFollow,omitempty"`
}

// FsOpenParams open a file for streamed reading (or, with Mode
// FsOpenReplace, writing: see fs_stream.go) under a client-chosen id.
type FsOpenParams struct {
	HandleID string     `json:"handleId" msgpack:"handleId"`
	Path     string     `json:"path" msgpack:"path"`
	Mode     FsOpenMode `json:"mode,omitempty" msgpack:"mode,omitempty"`
	Sandbox  any        `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// Digest names the algorithm of the running digest fs/close returns
	// (outpost addition): DigestSHA256 when empty, or DigestXXH3.
	Digest string `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// FsCreateParams open a file for a streamed write (outpost addition).
type FsCreateParams struct {
	HandleID string  `json:"handleId" msgpack:"handleId"`
	Path     string  `json:"path" msgpack:"path"`
	Mode     *uint32 `json:"mode,omitempty" msgpack:"mode,omitempty"`
	Sandbox  any     `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	// NoFollow: no component of Path may be a symlink, and a symlink at
	// Path itself is replaced rather than written through (see
	// FsCreateDirectoryParams).
	NoFollow bool `json:"noFollow,omitempty" msgpack:"noFollow,omitempty"`
	// Digest: as FsOpenParams.Digest.
	Digest string `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// FsCreateSymlinkParams make the symlink Path holding Target (outpost
// addition). Target is stored as given, never resolved; an entry at Path
// that is not a directory is replaced atomically.
type FsCreateSymlinkParams struct {
	Path     string `json:"path" msgpack:"path"`
	Target   string `json:"target" msgpack:"target"`
	Sandbox  any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	NoFollow bool   `json:"noFollow,omitempty" msgpack:"noFollow,omitempty"`
}

// FsHandleResult names an open handle.
type FsHandleResult struct {
	HandleID string `json:"handleId" msgpack:"handleId"`
	// Digest is the algorithm of the handle's running digest, when the
	// request named one (outpost addition; a codex client sees the result
	// it knows). Absent, it is DigestSHA256 — also from executors before
	// named digests, whatever was asked.
	Digest string `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// FsReadBlockParams read up to Len bytes at Offset.
type FsReadBlockParams struct {
	HandleID string `json:"handleId" msgpack:"handleId"`
	Offset   uint64 `json:"offset" msgpack:"offset"`
	Len      uint64 `json:"len" msgpack:"len"`
}

// FsReadBlockResult is one block; EOF says the file ends with it.
type FsReadBlockResult struct {
	Chunk []byte `json:"chunk" msgpack:"chunk"`
	EOF   bool   `json:"eof" msgpack:"eof"`
}

// FsWriteBlockParams write Chunk at Offset (codex's shape; its bounds on
// a replace handle are in fs_stream.go).
type FsWriteBlockParams struct {
	HandleID string `json:"handleId" msgpack:"handleId"`
	Offset   uint64 `json:"offset" msgpack:"offset"`
	Chunk    []byte `json:"chunk" msgpack:"chunk"`
}

// FsCloseParams close a handle; a created file is moved into place, or
// with Discard (outpost addition) dropped.
type FsCloseParams struct {
	HandleID string `json:"handleId" msgpack:"handleId"`
	Discard  bool   `json:"discard,omitempty" msgpack:"discard,omitempty"`
}

// FsCloseResult: codex returns {}; outpost adds the file's digest when the
// whole file passed through the handle in order (its blocks were hashed on
// the way), sparing a second pass for an end-to-end check.
type FsCloseResult struct {
	Digest *FsHashResult `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// The digests an executor computes for fs/hash and a handle's fs/close
// (outpost additions).
//
// Every record between client and executor is already authenticated by the
// end-to-end Noise channel, so a transfer's digest is not what stops
// tampering on the way; it catches what the channel cannot see: a block
// lost, repeated or written at the wrong offset, a torn or short write,
// storage returning other bytes. DigestXXH3 (XXH3-128, non-cryptographic)
// does that at ~20 GB/s per core; DigestSHA256 (~1.6 GB/s here) stays the
// default of the protocol, for callers that want a cryptographic digest
// of the file as stored.
const (
	DigestSHA256 = "sha256"
	DigestXXH3   = "xxh3-128"
)

// FsHashParams name a file to digest and the algorithm (DigestSHA256 when
// empty).
type FsHashParams struct {
	Path    string `json:"path" msgpack:"path"`
	Sandbox any    `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
	Digest  string `json:"digest,omitempty" msgpack:"digest,omitempty"`
}

// FsHashResult is a file's digest (outpost addition): lower-case hex in the
// field of the algorithm asked for.
type FsHashResult struct {
	Sha256 string `json:"sha256,omitempty" msgpack:"sha256,omitempty"`
	XXH3   string `json:"xxh3,omitempty" msgpack:"xxh3,omitempty"`
	Size   uint64 `json:"size" msgpack:"size"`
}

// Sum is the hex digest of algorithm alg ("" for DigestSHA256), or "" when
// the result carries none.
func (r FsHashResult) Sum(alg string) string {
	if alg == DigestXXH3 {
		return r.XXH3
	}
	return r.Sha256
}
