package protocol

// Missing-path watches: codex 0.171's fs/watchMissing and fs/missingChanged,
// as its exec-server answers them (probed against the 0.171.0 binary).
//
// A client that looked for files and did not find them (AGENTS.md, skills,
// config) asks to hear when any of them might have appeared, so it can keep
// its "missing" answer cached until then. The watch belongs to the
// connection: one at a time, replaced by each newer request, dropped when it
// fires and when the connection closes (a resumed session starts without
// one).
//
//   - WatchID orders requests: a request whose id is not above every id seen
//     on the connection is stale and answered Watching false, changing
//     nothing. Otherwise the current watch (if any) is dropped, and a new one
//     is made when every Missing path is absent (lstat: a dangling symlink
//     exists), Present (when given) exists, no existing component of any of
//     them is a symlink or a non-directory, Missing holds at most
//     MaxWatchMissingPaths paths (duplicates count) and their existing
//     ancestor directories, with Present's, number at most
//     MaxWatchMissingDirs. Otherwise Watching is false: the client must not
//     cache.
//   - fs/missingChanged {watchId} is sent once, then the watch is gone, when
//     any watched path or one of its ancestors is created, removed, renamed,
//     written or has its attributes changed (a Missing path appearing, a
//     parent of it being made or removed, Present being modified or
//     removed); changes to unrelated names beside them do not fire.
//
// Paths are file: URIs (outpost also takes absolute paths, as in its other
// fs calls). A malformed URI (empty, relative, another scheme, a query or
// fragment, NUL) is an invalid-params error (-32602); a well-formed URI that
// names nothing on this host (another host, a Windows drive) is Watching
// false, as codex answers.
const (
	MethodFsWatchMissing   = "fs/watchMissing"
	MethodFsMissingChanged = "fs/missingChanged"
)

// codex 0.171's bounds on one watch: more paths, or more directories to
// watch, are answered Watching false.
const (
	MaxWatchMissingPaths = 64
	MaxWatchMissingDirs  = 64
)

// FsWatchMissingParams ask to hear when any of Missing appears or Present
// changes.
type FsWatchMissingParams struct {
	WatchID uint64   `json:"watchId" msgpack:"watchId"`
	Missing []string `json:"missing" msgpack:"missing"`
	// Present is a path that exists now and is watched for changes too.
	Present *string `json:"present,omitempty" msgpack:"present,omitempty"`
	// Sandbox (outpost addition; codex ignores it): when given, every path
	// must be readable under the policy, or the call is refused.
	Sandbox any `json:"sandbox,omitempty" msgpack:"sandbox,omitempty"`
}

// FsWatchMissingResult says whether a watch was made.
type FsWatchMissingResult struct {
	Watching bool `json:"watching" msgpack:"watching"`
}

// FsMissingChangedParams name the watch that fired.
type FsMissingChangedParams struct {
	WatchID uint64 `json:"watchId" msgpack:"watchId"`
}
