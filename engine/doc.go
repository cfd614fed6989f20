// Package engine is outpost's process engine: it starts processes on this
// machine and keeps what they do, for whoever drives them.
//
// A Backend turns a Spec — a prepared start request: native argv, cwd and
// final environment, and for a sandboxed run the helper and its setup from
// package sandbox — into a Process. LocalBackend starts real children, each
// in a process group of its own (a session of its own on a PTY) with a
// parent-death signal and, given a cgroup.Manager, in a cgroup of its own.
// A Process takes stdin writes (bounded queue, retried writes de-duplicated
// by WriteIDs), signals, resizes, terminate and kill; everything it emits
// goes to its EventLog: output chunks, then its exit, then its close, in one
// sequence. The log serves long polls (Read) and subscriptions with replay
// (Subscribe), holds back a process whose holding subscriber has not caught
// up, and otherwise evicts its oldest output within Retention. ChildEnv
// computes a child's environment from an EnvPolicy.
//
// Bounds: per process a Retention (default 8 MiB and 100,000 chunks; chunks
// of at most MaxChunkBytes), a stdin queue (LocalBackend.StdinQueueWrites
// and StdinQueueBytes), the last 4096 write ids, and at most four
// goroutines (two output pumps, a waiter, a stdin feeder).
//
// What it does not do: it knows nothing of sessions, connections, codecs
// or the wire. Client paths, process ids, process tables, sandbox policy
// resolution and metrics belong to package executor, which prepares a Spec
// and serves a Process's log to its clients.
package engine
