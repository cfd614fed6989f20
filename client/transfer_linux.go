package client

import "golang.org/x/sys/unix"

// oDirRef opens the destination's directories as references only
// (O_PATH): no read permission on them is needed, and nothing can be read
// through the descriptor.
const oDirRef = unix.O_PATH

// maybeSymlinkErr: Linux refuses O_NOFOLLOW|O_DIRECTORY on a symlink with
// ENOTDIR (O_PATH would otherwise open the link itself).
func maybeSymlinkErr(err error) bool { return err == unix.ENOTDIR }
