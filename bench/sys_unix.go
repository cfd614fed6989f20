//go:build unix

package main

import "syscall"

// raiseNofile raises RLIMIT_NOFILE as far as it goes (the hard limit, or
// above it as root) and returns the soft limit now. The relays, started
// after, inherit it.
func raiseNofile(want uint64) uint64 {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		return 0
	}
	if uint64(rl.Max) < want {
		up := rl
		setLimit(&up.Cur, want)
		setLimit(&up.Max, want)
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			return want
		}
	}
	rl.Cur = rl.Max
	syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl)
	syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl)
	return uint64(rl.Cur)
}

// setLimit stores v in a limit field, uint64 on Linux and macOS but int64
// on FreeBSD.
func setLimit[T int64 | uint64](field *T, v uint64) { *field = T(v) }

// syncDisks flushes dirty pages to disk, so each run starts from the same
// page-cache state.
func syncDisks() { syscall.Sync() }
