// Package bench measures outpost beside its peers and the physical limit
// on the same machine in one run: start-to-exit latency of /bin/true
// (p50, p99) and the stdout throughput of one process, for a local
// fork/exec, outpost's exec-server and the codex exec-server, both over
// their WebSocket listeners. Run it with `make bench` (which installs
// codex first); without codex its rows are skipped.
package bench
