package sandbox

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
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

// LikelyDenied classifies a sandboxed command's exit: never for exit 0,
// nor 126/127 (could not execute / not found — the helper's own setup
// failures exit 126 too); always for death by SIGSYS (128+31); otherwise
// when its output holds a denial marker.
func LikelyDenied(exitCode int32, outputContains func(markers ...string) bool) bool {
	switch exitCode {
	case 0, 126, 127:
		return false
	case 128 + 31:
		return true
	}
	return outputContains(DenialMarkers...)
}
