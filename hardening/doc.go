// Package hardening holds the bad-input suite: it builds the outpost
// binary, runs a relay, an executor joined to it and executors serving
// tcp:// and ws:// as real processes with --admin-listen, throws hostile
// input at each (garbage, truncated and oversized frames, slow handshakes,
// stream and connection floods, unknown methods, huge argv and env, invalid
// UTF-8, NUL bytes in paths), and after every case checks that /readyz
// answers and that each process's goroutine, fd and child-process counts
// are back where they were. The soak test (build tag soak) lives here too.
package hardening
