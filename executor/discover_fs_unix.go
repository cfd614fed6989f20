//go:build linux || darwin || freebsd

package executor

import (
	"io/fs"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

func (l localFS) list(dir string, max int) ([]capEnt, string, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, "", &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	f := os.NewFile(uintptr(fd), dir)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, "", &fs.PathError{Op: "stat", Path: dir, Err: err}
	}
	if err := checkNotHidden(fd, dir, l.hidden); err != nil {
		return nil, "", err
	}
	key := strconv.FormatUint(uint64(st.Dev), 10) + ":" + strconv.FormatUint(st.Ino, 10)
	var out []capEnt
	for len(out) < max {
		ents, err := f.ReadDir(min(max-len(out), 256))
		for _, e := range ents {
			t := e.Type()
			out = append(out, capEnt{name: e.Name(), dir: t.IsDir(), regular: t.IsRegular(), symlink: t&fs.ModeSymlink != 0})
		}
		if err != nil {
			return out, key, nil // io.EOF: the end
		}
	}
	if more, _ := f.ReadDir(1); len(more) > 0 {
		return out, key, errTooManyEntries
	}
	return out, key, nil
}
