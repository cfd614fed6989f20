// Package mcpserver is outpost's Model Context Protocol front end: the
// tools an agent that speaks MCP (Claude Code, Cursor, the OpenAI Agents
// SDK, codex's own [mcp_servers]) uses to run commands and edit files on
// an outpost executor — through a relay, end to end encrypted, sandboxed,
// resumable — as `outpost exec` does. cmd/outpost's `outpost mcp` serves
// it over stdio or Streamable HTTP; the protocol itself is the official
// Go SDK's (github.com/modelcontextprotocol/go-sdk).
//
// # Tools
//
//	run             a command to completion: exit code, signal, timeout,
//	                sandbox denial, each stream's head and tail with its
//	                byte count; output as notifications/progress when the
//	                call carries a progress token; notifications/cancelled
//	                terminates the command.
//	start           a long-running process; returns a handle.
//	read            a handle's output after a cursor (a byte offset into
//	                its stdout and stderr together), waiting up to wait_ms.
//	write_stdin     bytes to a handle's stdin, optionally closing it.
//	signal          INT, TERM, HUP, QUIT or KILL to a handle's group.
//	terminate       TERM, then KILL after the executor's grace.
//	list            the session's handles.
//	read_file       a byte range of a file; binary reported as such.
//	write_file      replace a file atomically.
//	edit_file       exact-string replacement with a count check.
//	list_directory  a directory's entries.
//	search          files under a directory by name glob and content.
//	executors       the executors this server may reach, online or not.
//
// Every tool takes "executor", one of Config.Executors (the first when
// omitted). File tools go through the executor's fs/* requests under the
// server's sandbox policy, so the executor — not this process — decides
// what a path may reach.
//
// # Policy
//
// A model never gets more than the operator allowed: a run's sandbox mode
// is one of Config.AllowedSandboxes (Config.DefaultSandbox when it names
// none, workspace-write on the workspace unless the operator chose
// otherwise), network only with Config.Network, and a workspace-write cwd
// inside the workspace (the executor refuses one reached through a
// symlink). Config.ReadOnly takes the write tools away and runs every
// command read-only. Refusals are tool errors wrapping the kinds in
// errors.go, so a caller in Go decides with errors.Is and a model reads
// the reason.
//
// # Bounds
//
//	MaxSessions         MCP sessions open at once (64; over HTTP a new
//	                    one past it gets 503)
//	MaxConcurrentCalls  tool calls in flight per session (32; more are
//	                    refused, kind busy), plus MaxControlCalls (8)
//	                    for terminate, signal and list
//	MaxMessageBytes     one JSON-RPC message, stdio line or HTTP body
//	                    (8 MiB)
//	MaxHandles          live start handles per MCP session (16)
//	HandleOutput        output kept per handle for read (1 MiB; older
//	                    bytes are dropped and counted)
//	MaxOutputBytes      run's cap per stream (256 KiB; default 32 KiB,
//	                    half head, half tail)
//	MaxReadBytes        one read or read_file answer (512 KiB)
//	                    (each answer carries its text twice, as content
//	                    and structured, and JSON may spell a control byte
//	                    in six: these caps keep the worst answer near
//	                    6 MiB, under MaxMessageBytes and the SDK client's
//	                    16 MiB frame)
//	MaxWait             read's wait_ms (30 s)
//	MaxTimeout          run's timeout_ms (Config, 30 min)
//	MaxFileBytes        a file edit_file rewrites (16 MiB)
//	search              SearchMaxFiles entries visited (directories
//	                    too), SearchMaxFileBytes
//	                    read of each, SearchMaxDepth directories deep,
//	                    max_results ≤ SearchMaxResults
//
// A session's handles end with it: when the MCP client goes away, every
// process it started is terminated. A handle survives a dropped
// connection to the executor: the client's Remote resumes the session and
// replays the output, exactly once.
package mcpserver
