package fakemodel

import (
	"strings"
	"testing"
)

// A Patch step answers with a custom_tool_call when codex offers the
// freeform apply_patch, with a function_call when it offers the function,
// and counts codex's custom_tool_call_output as the step's output.
func TestPatchStep(t *testing.T) {
	patch := "*** Begin Patch\n*** Add File: a.txt\n+x\n*** End Patch"
	m := Start([]Step{{Patch: patch}, {Say: "patched"}})
	defer m.Close()
	custom := append([]any{map[string]any{"type": "custom", "name": "apply_patch"}}, unifiedTools...)

	it := item(t, ask(t, m, map[string]any{"stream": true, "tools": custom, "input": []any{}}))
	if it["type"] != "custom_tool_call" || it["name"] != "apply_patch" || it["input"] != patch {
		t.Fatalf("first answer %v, want a custom apply_patch call with the patch", it)
	}
	back := map[string]any{"type": "custom_tool_call_output", "call_id": it["call_id"], "output": "Success. Updated the following files:\nA a.txt\n"}
	it = item(t, ask(t, m, map[string]any{"stream": true, "tools": custom, "input": []any{it, back}}))
	if it["type"] != "message" {
		t.Fatalf("after the patch's output the model should speak, got %v", it)
	}
	outs := m.ToolOutputs()
	if len(outs) != 1 || outs[0].Tool != "apply_patch" || !strings.Contains(outs[0].Text, "A a.txt") {
		t.Fatalf("tool outputs %v", outs)
	}
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}

	fn := Start([]Step{{Patch: patch}})
	defer fn.Close()
	it = item(t, ask(t, fn, map[string]any{"stream": true, "tools": []any{map[string]any{"type": "function", "name": "apply_patch"}}, "input": []any{}}))
	if it["type"] != "function_call" || it["name"] != "apply_patch" || !strings.Contains(it["arguments"].(string), "Begin Patch") {
		t.Fatalf("function apply_patch answer %v", it)
	}
}

// Without an apply_patch tool a Patch step is an error the test sees.
func TestPatchStepWithoutTool(t *testing.T) {
	m := Start([]Step{{Patch: "*** Begin Patch\n*** End Patch"}})
	defer m.Close()
	it := item(t, ask(t, m, map[string]any{"stream": true, "tools": unifiedTools, "input": []any{}}))
	if it["type"] != "message" {
		t.Fatalf("answer %v, want a message", it)
	}
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "no apply_patch tool") {
		t.Fatalf("Err() = %v", err)
	}
}
