package remotefs

import (
	"time"

	"golang.org/x/sys/unix"
)

func mtimeOf(st *unix.Stat_t) time.Time     { return time.Unix(st.Mtim.Sec, st.Mtim.Nsec) }
func birthOf(st *unix.Stat_t) unix.Timespec { return st.Btim }
