//go:build darwin || freebsd

package remotefs

import (
	"golang.org/x/sys/unix"

	"github.com/outpost-exec/outpost/protocol"
)

// statAt describes the entry name in dirfd, not following a symlink;
// both systems keep a birth time in struct stat (statBirth).
func statAt(dirfd int, name string) (protocol.FsMetadata, error) {
	var st unix.Stat_t
	if err := unix.Fstatat(dirfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return protocol.FsMetadata{}, err
	}
	typ := uint32(st.Mode) & unix.S_IFMT
	md := protocol.FsMetadata{
		IsDirectory:  typ == unix.S_IFDIR,
		IsFile:       typ == unix.S_IFREG,
		IsSymlink:    typ == unix.S_IFLNK,
		Size:         uint64(st.Size),
		ModifiedAtMs: mtimeOf(&st).UnixMilli(),
		Mode:         uint32(st.Mode) & 0o777,
	}
	if b := birthOf(&st); b.Sec > 0 {
		md.CreatedAtMs = b.Sec*1000 + int64(b.Nsec)/1e6
	}
	return md, nil
}
