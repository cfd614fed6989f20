// Package remotefs is the executor's file system for remote clients: the
// fs/* methods (whole-file reads and writes, directories, metadata,
// remove, copy, hash, and handles for block transfers), each judged by the
// sandbox policy the call carries.
//
// Every path goes through Config.Paths (file: URIs, prefix mappings) and is
// then resolved once, to a descriptor (fsroot.go): the parent
// directory of what the call changes, or the object a read opens, reached
// as the path says (symlinks followed, /proc magic links not). When the
// request carries a sandbox policy, the policy judges where that
// descriptor really is (/proc/self/fd on Linux) plus the final name; the operation
// then works only relative to the descriptor (fstree.go), so a
// directory swapped for a symlink after the check cannot lead out of what
// the policy allows. Without a policy the same code runs, unjudged, as the
// executor's user. Writes go to a temporary file created with
// O_EXCL|O_NOFOLLOW in the verified parent directory and renamed into
// place through its descriptor.
//
// Platforms: Linux has the full guarantee (openat2, O_PATH, /proc).
// macOS and FreeBSD run the same descriptor-relative code with weaker
// parts, listed in fsroot_bsd.go (directories opened for reading, no
// O_PATH; on FreeBSD a call under a policy is refused, as a descriptor's
// place cannot be told). fs/watchMissing needs inotify (Linux). Elsewhere
// (Windows) every call is refused as unsupported (fs_other.go).
//
// Bounds: whole-file reads and writes Config.MaxFileBytes; blocks
// maxBlockBytes (4 MiB); open handles Config.MaxFileHandles per Session,
// closed (and unfinished writes discarded) by End; directory listings
// maxDirEntries; recursive removes and copies maxTreeDepth levels and
// maxTreeEntries entries.
//
// What it does not do: it decodes no messages and knows no connections or
// processes. Package executor owns a Session per executor session,
// registers its methods in the method table and ends it with the session.
package remotefs
