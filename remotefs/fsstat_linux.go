package remotefs

import (
	"time"

	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
)

// statAt describes the entry name in dirfd, not following a symlink:
// statx, for the creation time where the file system keeps one.
func statAt(dirfd int, name string) (protocol.FsMetadata, error) {
	var stx unix.Statx_t
	if err := unix.Statx(dirfd, name, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_BASIC_STATS|unix.STATX_BTIME, &stx); err != nil {
		return protocol.FsMetadata{}, err
	}
	typ := uint32(stx.Mode) & unix.S_IFMT
	md := protocol.FsMetadata{
		IsDirectory:  typ == unix.S_IFDIR,
		IsFile:       typ == unix.S_IFREG,
		IsSymlink:    typ == unix.S_IFLNK,
		Size:         stx.Size,
		ModifiedAtMs: time.Unix(stx.Mtime.Sec, int64(stx.Mtime.Nsec)).UnixMilli(),
		Mode:         uint32(stx.Mode) & 0o777,
	}
	if stx.Mask&unix.STATX_BTIME != 0 {
		md.CreatedAtMs = stx.Btime.Sec*1000 + int64(stx.Btime.Nsec)/1e6
	}
	return md, nil
}
