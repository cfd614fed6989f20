package protocol

// fs/walk: codex 0.171's listing of a directory tree (codex uses it to
// find repository skills under .agents/skills). The shapes and the
// semantics below are codex 0.171's exec-server, as observed on the
// wire:
//
//   - The walk is breadth-first from Path (which is not itself listed):
//     every directory's entries in byte order of their names, directory
//     after directory in the order they were listed.
//   - Only regular files ("file") and directories ("directory") are
//     listed. A symlink is left out unless FollowDirectorySymlinks is set
//     and it leads to a directory: then it is listed as a directory under
//     its own name and walked like one. A directory already walked (a
//     link back, two links to one place) is listed but not walked again.
//   - Directories at depth MaxDepth are listed but not read (Path is
//     depth 0, so MaxDepth 0 lists Path's entries only); this never sets
//     Truncated. PruneHiddenDirectories lists a directory whose name
//     starts with "." but does not read it (Path itself is always read).
//   - MaxEntries counts every name whose target can be looked at, listed
//     or not: a fifo, a symlink to a file or an unfollowed link to a
//     directory count, a dangling symlink does not. MaxDirectories counts
//     the directories read or tried (Path is one; a directory listed twice
//     is read once and counted once).
//   - codex also bounds the listing's size: each entry costs the length
//     of its URI plus 64, and the walk stops before the total passes 4 MiB
//     (some 40,000 entries of short paths).
//   - Truncated reports that something was left out for a limit: a name
//     past MaxEntries, an entry past the size budget, or a directory to
//     read past MaxDirectories. The walk stops there.
//   - A directory that cannot be read (the sandbox policy denies it, it
//     vanished) is listed as usual and reported in Errors with the
//     system's message ("Permission denied (os error 13)"); the walk goes
//     on.
//   - Path itself: missing is CodeNotFound (-32004), denied
//     CodeInvalidRequest (-32600), other failures CodeInternal (-32603),
//     with the system's message. A Path that is a file, or a symlink
//     without FollowDirectorySymlinks, gives an empty result.
//
// Limits of 0 (MaxDirectories, MaxEntries) or above codex's maximums are
// refused (CodeInvalidRequest) before Path is looked at.
const MethodFsWalk = "fs/walk"

// codex 0.171's maximums for fs/walk's limits; a request above any of
// them is refused, not clamped.
const (
	MaxWalkDepth       = 64
	MaxWalkDirectories = 10_000
	MaxWalkEntries     = 50_000
)

// The kinds of an FsWalkEntry.
const (
	WalkKindFile      = "file"
	WalkKindDirectory = "directory"
)

// FsWalkParams walk the tree at Path. Options is required, as in codex.
type FsWalkParams struct {
	Path    string         `json:"path" msgpack:"path"`
	Options *FsWalkOptions `json:"options" msgpack:"options"`
	Sandbox any            `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
}

// FsWalkOptions bound and shape a walk. Every field but
// PruneHiddenDirectories is required (codex: "missing field
// `maxDepth`"); pointers tell a field left out from a zero.
type FsWalkOptions struct {
	// MaxDepth is how many levels below Path are read (0 to MaxWalkDepth).
	MaxDepth *uint64 `json:"maxDepth" msgpack:"maxDepth"`
	// MaxDirectories bounds the directories read, Path included (1 to
	// MaxWalkDirectories).
	MaxDirectories *uint64 `json:"maxDirectories" msgpack:"maxDirectories"`
	// MaxEntries bounds the entries listed (1 to MaxWalkEntries).
	MaxEntries *uint64 `json:"maxEntries" msgpack:"maxEntries"`
	// FollowDirectorySymlinks lists and walks symlinks to directories.
	FollowDirectorySymlinks *bool `json:"followDirectorySymlinks" msgpack:"followDirectorySymlinks"`
	// PruneHiddenDirectories leaves directories named ".*" unread.
	PruneHiddenDirectories bool `json:"pruneHiddenDirectories,omitempty" msgpack:"pruneHiddenDirectories,omitempty"`
}

// FsWalkResult is codex's WalkOutcome. Entries and Errors are never
// null on the wire.
type FsWalkResult struct {
	Entries   []FsWalkEntry `json:"entries" msgpack:"entries"`
	Errors    []FsWalkError `json:"errors" msgpack:"errors"`
	Truncated bool          `json:"truncated" msgpack:"truncated"`
}

// FsWalkEntry is one file or directory found: its path as a file: URI
// under the walk's Path, and WalkKindFile or WalkKindDirectory.
type FsWalkEntry struct {
	Path string `json:"path" msgpack:"path"`
	Kind string `json:"kind" msgpack:"kind"`
}

// FsWalkError is a directory that was listed but could not be read.
type FsWalkError struct {
	Path    string `json:"path" msgpack:"path"`
	Message string `json:"message" msgpack:"message"`
}
