package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// MaxPolicyBytes bounds an encoded policy.
const MaxPolicyBytes = 64 << 10

// MaxPolicyEntries bounds a policy's entries and roots.
const MaxPolicyEntries = 1024

// policyJSON is a policy on the wire (the sandbox field of process/start):
//
//	{"mode": "workspace-write", "network": false,
//	 "writableRoots": ["/srv/cache"], "protectedNames": [".git"],
//	 "entries": [{"path": ":root", "access": "read"}, ...]}
type policyJSON struct {
	Mode           string   `json:"mode"`
	Network        bool     `json:"network"`
	WritableRoots  []string `json:"writableRoots"`
	ProtectedNames []string `json:"protectedNames"`
	Entries        []struct {
		Path   string `json:"path"`
		Access string `json:"access"`
	} `json:"entries"`
}

// ParsePolicy decodes and validates a policy.
func ParsePolicy(data []byte) (Policy, error) {
	if len(data) > MaxPolicyBytes {
		return Policy{}, fmt.Errorf("sandbox policy of %d bytes exceeds %d", len(data), MaxPolicyBytes)
	}
	var pj policyJSON
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&pj); err != nil {
		return Policy{}, fmt.Errorf("sandbox policy: %w", err)
	}
	if dec.More() {
		return Policy{}, errors.New("sandbox policy: trailing data")
	}
	if len(pj.Entries) > MaxPolicyEntries || len(pj.WritableRoots) > MaxPolicyEntries || len(pj.ProtectedNames) > MaxPolicyEntries {
		return Policy{}, fmt.Errorf("sandbox policy: more than %d entries", MaxPolicyEntries)
	}
	p := Policy{Network: pj.Network, WritableRoots: pj.WritableRoots, ProtectedNames: pj.ProtectedNames}
	if pj.Mode != "" || len(pj.Entries) == 0 {
		m, err := ParseMode(pj.Mode)
		if err != nil {
			return Policy{}, fmt.Errorf("sandbox policy: %w", err)
		}
		p.Mode = m
	}
	for i, e := range pj.Entries {
		a, err := ParseAccess(e.Access)
		if err != nil {
			return Policy{}, fmt.Errorf("sandbox policy: entries[%d]: %w", i, err)
		}
		p.Entries = append(p.Entries, Entry{Path: e.Path, Access: a})
	}
	if err := p.Validate(); err != nil {
		return Policy{}, fmt.Errorf("sandbox policy: %w", err)
	}
	return p, nil
}

// DenialMarkers are lower-case phrases that, in the output of a sandboxed
// command that failed, mark the failure as a likely sandbox denial. The
// output is never replaced; the flag only classifies it.
var DenialMarkers = []string{"permission denied", "operation not permitted", "read-only file system"}

// Classify decides whether a sandboxed command's failure was likely the
// sandbox's doing:
//   - never for exit 0, nor 126/127 (could not execute / not found — the
//     helper's own set-up failures exit 126 too);
//   - always for death by SIGSYS;
//   - otherwise when a line of its output holds a denial marker and
//     either names no absolute path, or names one this policy does not
//     let it write (a denial on a path it may write came from ordinary
//     file permissions, not the sandbox).
//
// lines yields the retained output one line at a time.
func (r Resolved) Classify(exitCode, signal int32, lines func(yield func(line string) bool)) bool {
	switch {
	case exitCode == 0 || exitCode == 126 || exitCode == 127:
		return false
	case signal == 31: // SIGSYS
		return true
	}
	denied := false
	lines(func(line string) bool {
		low := strings.ToLower(line)
		marked := false
		for _, m := range DenialMarkers {
			if strings.Contains(low, m) {
				marked = true
				break
			}
		}
		if !marked {
			return true
		}
		paths := absolutePaths(line)
		if len(paths) == 0 {
			denied = true
			return false
		}
		for _, p := range paths {
			if r.Access(p) != AccessWrite {
				denied = true
				return false
			}
		}
		return true
	})
	return denied
}

// absolutePaths picks the absolute paths out of an error line such as
// "sh: 1: cannot create /srv/x: Permission denied" or
// "touch: cannot touch '/etc/x': Read-only file system".
func absolutePaths(line string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(line, func(r rune) bool {
		return r == ' ' || r == '\t' || r == '\'' || r == '"' || r == '`' || r == '(' || r == ')'
	}) {
		f = strings.TrimRight(f, ":,;.")
		if strings.HasPrefix(f, "/") && len(f) > 1 {
			out = append(out, f)
		}
	}
	return out
}
