package mcpserver

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.uber.org/zap"
)

type searchArgs struct {
	Path       string `json:"path,omitempty" jsonschema:"the directory to search, relative to the workspace or absolute; default the workspace"`
	NameGlob   string `json:"name_glob,omitempty" jsonschema:"match file names against this glob (*.go, test_*.py); default every file"`
	Content    string `json:"content,omitempty" jsonschema:"report the lines that contain this text (exact, case-sensitive); default: report the matching files"`
	MaxResults int    `json:"max_results,omitempty" jsonschema:"most matches to return (default 100, at most 1000)"`
	Executor   string `json:"executor,omitempty" jsonschema:"which executor; default the first configured"`
}

type searchMatch struct {
	Path string `json:"path"`
	Line int    `json:"line,omitempty" jsonschema:"the line number (from 1), for a content search"`
	Text string `json:"text,omitempty" jsonschema:"the line (its first 300 bytes)"`
}

type searchResult struct {
	Matches   []searchMatch `json:"matches"`
	Truncated bool          `json:"truncated" jsonschema:"the search stopped at a bound (max_results, files visited, depth) before the whole tree was seen"`
	Visited   int           `json:"entries_visited" jsonschema:"files and directories seen (at most 20000)"`
	Skipped   int           `json:"files_skipped,omitempty" jsonschema:"files not read for content: binary, unreadable, or larger than 1 MiB"`
}

// errSearchBound ends a walk at one of its bounds.
var errSearchBound = errors.New("search bound reached")

const maxMatchText = 300

func (s *Server) search(ctx context.Context, req *mcp.CallToolRequest, in searchArgs) (*mcp.CallToolResult, searchResult, error) {
	limit := DefaultSearchResults
	switch {
	case in.MaxResults < 0 || in.MaxResults > SearchMaxResults:
		return nil, searchResult{}, errorf(ErrInvalidArgument, "max_results %d: want 1 to %d", in.MaxResults, SearchMaxResults)
	case in.MaxResults > 0:
		limit = in.MaxResults
	}
	if in.NameGlob != "" {
		if _, err := path.Match(in.NameGlob, ""); err != nil {
			return nil, searchResult{}, errorf(ErrInvalidArgument, "name_glob %q: %v", in.NameGlob, err)
		}
	}
	t, f, err := s.files(ctx, in.Executor, false)
	if err != nil {
		return nil, searchResult{}, err
	}
	root, err := resolvePath(t.workspace, in.Path)
	if err != nil {
		return nil, searchResult{}, err
	}
	fsys := f.FS(ctx, root)
	out := searchResult{Matches: []searchMatch{}}
	needle := []byte(in.Content)
	walkErr := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if p == "." {
				return err
			}
			return nil // an unreadable subdirectory is passed over
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// Every entry counts, directories too: a tree of empty
		// directories costs a request each.
		if out.Visited++; out.Visited > SearchMaxFiles {
			out.Visited--
			out.Truncated = true
			return errSearchBound
		}
		if d.IsDir() {
			if p != "." && strings.Count(p, "/")+1 >= SearchMaxDepth {
				out.Truncated = true
				return fs.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if in.NameGlob != "" {
			if ok, _ := path.Match(in.NameGlob, d.Name()); !ok {
				return nil
			}
		}
		full := path.Join(root, p)
		if len(needle) == 0 {
			out.Matches = append(out.Matches, searchMatch{Path: full})
		} else {
			info, err := d.Info()
			if err != nil || info.Size() > SearchMaxFileBytes {
				out.Skipped++
				return nil
			}
			data, err := readAtMost(ctx, f, full, SearchMaxFileBytes)
			if err != nil || bytes.IndexByte(data, 0) >= 0 {
				out.Skipped++
				return nil
			}
			sc := bufio.NewScanner(bytes.NewReader(data))
			sc.Buffer(nil, SearchMaxFileBytes+1)
			for line := 1; sc.Scan(); line++ {
				if !bytes.Contains(sc.Bytes(), needle) {
					continue
				}
				text := sc.Bytes()
				if len(text) > maxMatchText {
					text = trimRunes(text[:maxMatchText])
				}
				out.Matches = append(out.Matches, searchMatch{Path: full, Line: line, Text: validText(string(text))})
				if len(out.Matches) >= limit {
					break
				}
			}
		}
		if len(out.Matches) >= limit {
			out.Truncated = true
			return errSearchBound
		}
		return nil
	})
	if walkErr != nil && !errors.Is(walkErr, errSearchBound) {
		return nil, searchResult{}, fmt.Errorf("search %s: %w", root, walkErr)
	}
	note(ctx, t.id, zap.String("path", root), zap.String("glob", in.NameGlob), zap.Int("matches", len(out.Matches)))
	var b strings.Builder
	for _, m := range out.Matches {
		if m.Line > 0 {
			fmt.Fprintf(&b, "%s:%d: %s\n", m.Path, m.Line, m.Text)
		} else {
			fmt.Fprintf(&b, "%s\n", m.Path)
		}
	}
	if len(out.Matches) == 0 {
		b.WriteString("no matches\n")
	}
	if out.Truncated {
		b.WriteString("[the search stopped at a bound; narrow the path or the glob]\n")
	}
	return textResult(b.String()), out, nil
}
