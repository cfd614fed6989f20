package mcpserver

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func boolp(b bool) *bool { return &b }

// addTools registers the tool set; read-only servers get no write tools.
func (s *Server) addTools() {
	readOnly := &mcp.ToolAnnotations{ReadOnlyHint: true, OpenWorldHint: boolp(false)}
	addTool(s, &mcp.Tool{Name: "run", Title: "Run a command",
		Description: "Run a command on a remote executor to completion and return its exit code and output (the head and tail of each stream, with byte counts). " +
			"Give argv (no shell) or shell (a /bin/sh -c command line). It runs sandboxed: workspace-write by default (it may write only in the workspace). " +
			"For a command that keeps running (a server, a watcher) use start instead.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true), OpenWorldHint: boolp(true)}}, s.run)
	addTool(s, &mcp.Tool{Name: "start", Title: "Start a long-running process",
		Description: "Start a process on a remote executor and return a handle at once; read its output with read, feed it with write_stdin, stop it with signal or terminate. " +
			"Handles last as long as this MCP session (at most " + fmt.Sprint(s.cfg.MaxHandles) + " running at once) and survive a dropped connection to the executor.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true), OpenWorldHint: boolp(true)}}, s.start)
	addTool(s, &mcp.Tool{Name: "read", Title: "Read a process's output",
		Description: "Read a started process's output (stdout and stderr together) after a cursor, waiting up to wait_ms for something new. Returns the next cursor, whether it still runs, and its exit code once it has exited.",
		Annotations: readOnly}, s.read)
	addTool(s, &mcp.Tool{Name: "write_stdin", Title: "Write to a process's stdin",
		Description: "Write text to a started process's stdin; close it (end of input) with close.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(false)}}, s.writeStdin)
	addTool(s, &mcp.Tool{Name: "signal", Title: "Signal a process",
		Description: "Send INT (as Ctrl-C), TERM, HUP, QUIT or KILL to a started process's group.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true)}}, s.signal)
	addTool(s, &mcp.Tool{Name: "terminate", Title: "Terminate a process",
		Description: "Stop a started process: TERM to its group, KILL after the executor's grace. Says whether it was still running.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true), IdempotentHint: true}}, s.terminate)
	addTool(s, &mcp.Tool{Name: "list", Title: "List processes",
		Description: "List this session's started processes: handle, executor, command, running or its exit code.",
		Annotations: readOnly}, s.list)
	addTool(s, &mcp.Tool{Name: "read_file", Title: "Read a file",
		Description: "Read a file on the executor (a byte range: offset and length, 256 KiB by default). A binary file is reported as such unless encoding is base64.",
		Annotations: readOnly}, s.readFile)
	if !s.cfg.ReadOnly {
		addTool(s, &mcp.Tool{Name: "write_file", Title: "Write a file",
			Description: "Replace a file on the executor with new content, atomically (create_dirs makes missing parents). Only where the sandbox lets this server write (the workspace, by default).",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true), IdempotentHint: true, OpenWorldHint: boolp(false)}}, s.writeFile)
		addTool(s, &mcp.Tool{Name: "edit_file", Title: "Edit a file",
			Description: "Replace exact text in a file on the executor: old_string must occur exactly expected_replacements times (default once), or nothing changes. Quote enough surrounding lines to make it unique.",
			Annotations: &mcp.ToolAnnotations{DestructiveHint: boolp(true), OpenWorldHint: boolp(false)}}, s.editFile)
	}
	addTool(s, &mcp.Tool{Name: "list_directory", Title: "List a directory",
		Description: "List a directory on the executor: each entry's name, type (file, dir, symlink, other) and size.",
		Annotations: readOnly}, s.listDirectory)
	addTool(s, &mcp.Tool{Name: "search", Title: "Search files",
		Description: "Find files under a directory on the executor by name glob, and optionally the lines containing a text. Bounded: at most max_results matches, 20000 entries, 32 levels, files up to 1 MiB.",
		Annotations: readOnly}, s.search)
	addTool(s, &mcp.Tool{Name: "executors", Title: "List executors",
		Description: "List the executors this server may use (name them with the executor argument of the other tools) and whether each is online.",
		Annotations: readOnly}, s.executors)
}

type executorInfo struct {
	ID             string            `json:"id"`
	Online         bool              `json:"online"`
	Default        bool              `json:"default,omitempty"`
	Labels         map[string]string `json:"labels,omitempty"`
	ConnectedSince string            `json:"connected_since,omitempty"`
	Version        string            `json:"version,omitempty"`
	Error          string            `json:"error,omitempty" jsonschema:"why it could not be reached, when it was tried"`
}

type executorsResult struct {
	Executors []executorInfo `json:"executors"`
}

func (s *Server) executors(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, executorsResult, error) {
	out := executorsResult{Executors: make([]executorInfo, 0, len(s.order))}
	if s.cfg.List != nil {
		listed, err := s.cfg.List(ctx)
		if err != nil {
			return nil, executorsResult{}, fmt.Errorf("%w: listing the relay's executors: %w", ErrUnavailable, err)
		}
		byID := map[string]int{}
		for i, e := range listed {
			byID[e.ID] = i
		}
		for i, id := range s.order {
			ei := executorInfo{ID: id, Default: i == 0}
			if j, ok := byID[id]; ok {
				e := listed[j]
				ei.Online, ei.Labels, ei.Version = true, e.Labels, e.Version
				if e.ConnectedSince > 0 {
					ei.ConnectedSince = time.UnixMilli(e.ConnectedSince).UTC().Format(time.RFC3339)
				}
			}
			out.Executors = append(out.Executors, ei)
		}
	} else {
		for i, id := range s.order {
			ei := executorInfo{ID: id, Default: i == 0}
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := s.conns[id].get(cctx)
			cancel()
			ei.Online = err == nil
			if err != nil {
				ei.Error = err.Error()
			}
			out.Executors = append(out.Executors, ei)
		}
	}
	var b strings.Builder
	for _, e := range out.Executors {
		state := "offline"
		if e.Online {
			state = "online"
		}
		def := ""
		if e.Default {
			def = " (default)"
		}
		fmt.Fprintf(&b, "%s%s: %s\n", e.ID, def, state)
	}
	return textResult(b.String()), out, nil
}
