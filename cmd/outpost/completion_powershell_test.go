package main

// No PowerShell can be installed here (it is not in Debian, and npm's pwsh
// downloads it from elsewhere), so the PowerShell script is checked by
// reading it: a tokenizer for the part of the language the generator
// writes (single-quoted strings only, no escapes, ASCII) checks that every
// string is closed and every bracket matched, and a reader of the literals
// takes the completer's data back out of the script: the command paths,
// each group's children, each command's flags and values. Those must be
// the command table's, in the place the completer looks them up; strings
// with quotes and non-ASCII characters must come back as they went in.
// Where pwsh is on PATH, the script is also loaded and asked.

import (
	"bytes"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// checker is what the script checks report to: a *testing.T, or a
// recorder, to see that they fail on a wrong script.
type checker interface {
	Helper()
	Errorf(format string, args ...any)
	Fatalf(format string, args ...any)
}

// recorder is a checker that keeps the failures; Fatalf panics with it,
// for failsOn to recover.
type recorder struct{ failures []string }

func (r *recorder) Helper() {}
func (r *recorder) Errorf(f string, args ...any) {
	r.failures = append(r.failures, fmt.Sprintf(f, args...))
}
func (r *recorder) Fatalf(f string, args ...any) { r.Errorf(f, args...); panic(r) }

// failsOn runs check on a recorder and returns its failures.
func failsOn(check func(checker)) (failures []string) {
	r := &recorder{}
	defer func() {
		if p := recover(); p != nil && p != any(r) {
			panic(p)
		}
		failures = r.failures
	}()
	check(r)
	return r.failures
}

type psTok struct {
	kind byte // '\'' string, '$' variable, 'w' word, or the punctuation itself
	text string
	line int
}

// psNode is a token, or (open != 0) a bracketed group of nodes.
type psNode struct {
	tok  psTok
	open byte // '(', '{' or '['
	kids []psNode
}

func (n psNode) isWord(w string) bool { return n.open == 0 && n.tok.kind == 'w' && n.tok.text == w }
func (n psNode) isVar(v string) bool  { return n.open == 0 && n.tok.kind == '$' && n.tok.text == v }
func (n psNode) isPunct(c byte) bool  { return n.open == 0 && n.tok.kind == c }

// psIsQuote: PowerShell ends a single-quoted string at any of these.
func psIsQuote(r rune) bool { return r == '\'' || (r >= 0x2018 && r <= 0x201B) }

// psParse tokenizes src and nests its brackets. It refuses what the
// generator is not to write: double-quoted strings (with their escapes
// and subexpressions), backticks outside strings, block comments.
func psParse(src string) ([]psNode, error) {
	rs := []rune(src)
	line := 1
	type frame struct {
		open byte
		line int
		kids []psNode
	}
	stack := []frame{{}}
	push := func(n psNode) { stack[len(stack)-1].kids = append(stack[len(stack)-1].kids, n) }
	closer := map[rune]byte{')': '(', '}': '{', ']': '['}
	for i := 0; i < len(rs); {
		r := rs[i]
		switch {
		case r == '\n':
			line++
			i++
		case r == ' ' || r == '\t' || r == '\r':
			i++
		case r == '<' && i+1 < len(rs) && rs[i+1] == '#':
			return nil, fmt.Errorf("line %d: block comment", line)
		case r == '#':
			for i < len(rs) && rs[i] != '\n' {
				i++
			}
		case psIsQuote(r):
			start := line
			var b strings.Builder
			i++
			for {
				if i >= len(rs) {
					return nil, fmt.Errorf("line %d: string never closed", start)
				}
				c := rs[i]
				if psIsQuote(c) {
					if i+1 < len(rs) && psIsQuote(rs[i+1]) {
						b.WriteRune(rs[i+1])
						i += 2
						continue
					}
					i++
					break
				}
				if c == '\n' {
					line++
				}
				b.WriteRune(c)
				i++
			}
			push(psNode{tok: psTok{kind: '\'', text: b.String(), line: start}})
		case r == '"' || (r >= 0x201C && r <= 0x201E):
			return nil, fmt.Errorf("line %d: double-quoted string", line)
		case r == '`':
			return nil, fmt.Errorf("line %d: backtick outside a string", line)
		case r == '(' || r == '{' || r == '[':
			stack = append(stack, frame{open: byte(r), line: line})
			i++
		case r == ')' || r == '}' || r == ']':
			top := stack[len(stack)-1]
			if len(stack) == 1 || top.open != closer[r] {
				return nil, fmt.Errorf("line %d: %c closes %q", line, r, top.open)
			}
			stack = stack[:len(stack)-1]
			push(psNode{tok: psTok{line: top.line}, open: top.open, kids: top.kids})
			i++
		case r == '$':
			j := i + 1
			for j < len(rs) && (rs[j] == '_' || rs[j] == '?' || isAlnum(rs[j])) {
				j++
			}
			if j == i+1 {
				return nil, fmt.Errorf("line %d: lone $", line)
			}
			push(psNode{tok: psTok{kind: '$', text: string(rs[i+1 : j]), line: line}})
			i = j
		case strings.ContainsRune(",;=+|!@", r):
			push(psNode{tok: psTok{kind: byte(r), text: string(r), line: line}})
			i++
		default:
			j := i
			for j < len(rs) && !strings.ContainsRune(" \t\r\n(){}[]$,;=+|!@'\"`", rs[j]) && !psIsQuote(rs[j]) {
				j++
			}
			push(psNode{tok: psTok{kind: 'w', text: string(rs[i:j]), line: line}})
			i = j
		}
	}
	if len(stack) != 1 {
		top := stack[len(stack)-1]
		return nil, fmt.Errorf("line %d: %c never closed", top.line, top.open)
	}
	return stack[0].kids, nil
}

func isAlnum(r rune) bool {
	return r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
}

// psValue is a string (list == nil, isList false) or an array.
type psValue struct {
	s      string
	list   []psValue
	isList bool
}

func (v psValue) strings() ([]string, error) {
	if !v.isList {
		return nil, fmt.Errorf("%q is no array", v.s)
	}
	var out []string
	for _, e := range v.list {
		if e.isList {
			return nil, fmt.Errorf("nested array where strings were expected")
		}
		out = append(out, e.s)
	}
	return out, nil
}

// psEvalList reads the literals the generator writes into an array:
// 'string', ('a' + [char]0xNNNN + ...), @(...) and ,@(...) (an array as
// one element), separated by commas or lines.
func psEvalList(nodes []psNode) (psValue, error) {
	out := psValue{isList: true}
	for i := 0; i < len(nodes); i++ {
		n := nodes[i]
		switch {
		case n.isPunct(','):
		case n.open == 0 && n.tok.kind == '\'':
			out.list = append(out.list, psValue{s: n.tok.text})
		case n.open == '(':
			s, err := psEvalConcat(n.kids)
			if err != nil {
				return out, err
			}
			out.list = append(out.list, psValue{s: s})
		case n.isPunct('@') && i+1 < len(nodes) && nodes[i+1].open == '(':
			v, err := psEvalList(nodes[i+1].kids)
			if err != nil {
				return out, err
			}
			out.list = append(out.list, v)
			i++
		default:
			return out, fmt.Errorf("line %d: %q in an array literal", n.tok.line, n.tok.text)
		}
	}
	return out, nil
}

// psEvalConcat reads 'a' + [char]0xNNNN + 'b' ..., which must start with
// a string (else + adds numbers).
func psEvalConcat(nodes []psNode) (string, error) {
	var units []uint16
	for i := 0; i < len(nodes); i++ {
		if i > 0 {
			if !nodes[i].isPunct('+') || i+1 == len(nodes) {
				return "", fmt.Errorf("line %d: expected + and an operand", nodes[i].tok.line)
			}
			i++
		}
		n := nodes[i]
		switch {
		case n.open == 0 && n.tok.kind == '\'':
			for _, r := range n.tok.text {
				if r > 0x7F {
					return "", fmt.Errorf("non-ASCII %q in a literal", r)
				}
				units = append(units, uint16(r))
			}
		case i > 0 && n.open == '[' && len(n.kids) == 1 && n.kids[0].isWord("char") && i+1 < len(nodes):
			i++
			hex, ok := strings.CutPrefix(nodes[i].tok.text, "0x")
			u, err := strconv.ParseUint(hex, 16, 16)
			if !ok || err != nil || nodes[i].open != 0 {
				return "", fmt.Errorf("line %d: [char] %q", nodes[i].tok.line, nodes[i].tok.text)
			}
			units = append(units, uint16(u))
		default:
			return "", fmt.Errorf("line %d: %q in a concatenation", n.tok.line, n.tok.text)
		}
	}
	return string(utf16Decode(units)), nil
}

func utf16Decode(u []uint16) []rune {
	var out []rune
	for i := 0; i < len(u); i++ {
		if u[i] >= 0xD800 && u[i] < 0xDC00 && i+1 < len(u) && u[i+1] >= 0xDC00 && u[i+1] < 0xE000 {
			out = append(out, (rune(u[i])-0xD800)<<10+(rune(u[i+1])-0xDC00)+0x10000)
			i++
			continue
		}
		out = append(out, rune(u[i]))
	}
	return out
}

// psAssigned finds "$name = @(...)" among nodes and reads the array.
func psAssigned(nodes []psNode, name string) (psValue, bool, error) {
	for i := 0; i+3 < len(nodes); i++ {
		if nodes[i].isVar(name) && nodes[i+1].isPunct('=') && nodes[i+2].isPunct('@') && nodes[i+3].open == '(' {
			v, err := psEvalList(nodes[i+3].kids)
			return v, true, err
		}
	}
	return psValue{}, false, nil
}

type psCase struct {
	label string
	body  []psNode
}

// psSwitches finds the "switch -CaseSensitive -Exact ($path) {...}"
// statements among nodes, each as its cases in order.
func psSwitches(nodes []psNode) ([][]psCase, error) {
	var out [][]psCase
	for i := 0; i+4 < len(nodes); i++ {
		if !nodes[i].isWord("switch") {
			continue
		}
		if !nodes[i+1].isWord("-CaseSensitive") || !nodes[i+2].isWord("-Exact") || nodes[i+3].open != '(' ||
			len(nodes[i+3].kids) != 1 || !nodes[i+3].kids[0].isVar("path") || nodes[i+4].open != '{' {
			return nil, fmt.Errorf("line %d: a switch not on the exact, case-sensitive $path", nodes[i].tok.line)
		}
		body := nodes[i+4].kids
		var cases []psCase
		for j := 0; j < len(body); j += 2 {
			if j+1 >= len(body) || body[j+1].open != '{' {
				return nil, fmt.Errorf("line %d: a case without a block", body[j].tok.line)
			}
			label, err := psEvalList(body[j : j+1])
			if err != nil || len(label.list) != 1 || label.list[0].isList {
				return nil, fmt.Errorf("line %d: case label: %v", body[j].tok.line, err)
			}
			cases = append(cases, psCase{label.list[0].s, body[j+1].kids})
		}
		out = append(out, cases)
	}
	return out, nil
}

// psVarsUsed checks that every variable the script reads is a parameter,
// an automatic variable, or assigned somewhere: a typo in a name would
// read $null in PowerShell, silently.
func psVarsUsed(t checker, nodes []psNode) {
	t.Helper()
	defined := map[string]bool{"null": true, "true": true, "false": true, "Matches": true, "PROFILE": true}
	var used []psTok
	var walk func([]psNode)
	walk = func(ns []psNode) {
		for i, n := range ns {
			if n.open != 0 {
				// param(...), and [string]$x declares one too.
				if i > 0 && ns[i-1].isWord("param") {
					for _, k := range n.kids {
						if k.open == 0 && k.tok.kind == '$' {
							defined[k.tok.text] = true
						}
					}
				}
				// foreach ($x in ...) and for ($x = ...)
				if i > 0 && (ns[i-1].isWord("foreach") || ns[i-1].isWord("for")) && len(n.kids) > 0 && n.kids[0].tok.kind == '$' {
					defined[n.kids[0].tok.text] = true
				}
				walk(n.kids)
				continue
			}
			if n.tok.kind != '$' {
				continue
			}
			if i+1 < len(ns) && ns[i+1].isPunct('=') {
				defined[n.tok.text] = true
			}
			used = append(used, n.tok)
		}
	}
	walk(nodes)
	for _, u := range used {
		if !defined[u.text] {
			t.Errorf("line %d: $%s is read but never set", u.line, u.text)
		}
	}
}

// psCompleter is what the completer carries, read back from the script.
type psCompleter struct {
	known    []string
	groups   []psCase
	commands []psCase
}

func readPowershellScript(t checker, script string) psCompleter {
	t.Helper()
	for i, r := range script {
		if r > 0x7F {
			t.Fatalf("byte %d: non-ASCII %q in the script", i, r)
		}
	}
	nodes, err := psParse(script)
	if err != nil {
		t.Fatalf("script does not tokenize: %v", err)
	}
	// One statement: Register-ArgumentCompleter -Native -CommandName
	// outpost, outpost.exe -ScriptBlock {...}.
	want := []string{"Register-ArgumentCompleter", "-Native", "-CommandName", "outpost", ",", "outpost.exe", "-ScriptBlock"}
	if len(nodes) != len(want)+1 || nodes[len(want)].open != '{' {
		t.Fatalf("script is not one Register-ArgumentCompleter call: %d top-level nodes", len(nodes))
	}
	for i, w := range want {
		if nodes[i].open != 0 || nodes[i].tok.text != w {
			t.Fatalf("top-level word %d: %q, want %q", i, nodes[i].tok.text, w)
		}
	}
	body := nodes[len(want)].kids
	if len(body) < 2 || !body[0].isWord("param") || body[1].open != '(' {
		t.Fatalf("the script block does not start with param(...)")
	}
	var params []string
	for _, k := range body[1].kids {
		if k.tok.kind == '$' {
			params = append(params, k.tok.text)
		}
	}
	if !slices.Equal(params, []string{"wordToComplete", "commandAst", "cursorPosition"}) {
		t.Errorf("param(%q): not a native completer's", params)
	}
	psVarsUsed(t, body)

	var c psCompleter
	known, ok, err := psAssigned(body, "known")
	if !ok || err != nil {
		t.Fatalf("$known: found %v, %v", ok, err)
	}
	if c.known, err = known.strings(); err != nil {
		t.Fatalf("$known: %v", err)
	}
	sw, err := psSwitches(body)
	if err != nil || len(sw) != 2 {
		t.Fatalf("want two switches on $path (groups, commands): %d, %v", len(sw), err)
	}
	c.groups, c.commands = sw[0], sw[1]
	return c
}

// checkPowershellScript compares what the script carries with cmds.
func checkPowershellScript(t checker, script string, cmds []commandInfo) {
	t.Helper()
	c := readPowershellScript(t, script)

	// The paths, worked out here from the commands' names.
	var wantGroups, wantKnown []string
	wantGroups = append(wantGroups, "")
	kids := map[string][]string{}
	summary := map[string]string{}
	for _, cmd := range cmds {
		words := strings.Fields(cmd.path)
		summary[cmd.path] = cmd.summary
		for i := range words {
			parent, p := strings.Join(words[:i], " "), strings.Join(words[:i+1], " ")
			if !slices.Contains(kids[parent], words[i]) {
				kids[parent] = append(kids[parent], words[i])
			}
			if !slices.Contains(wantKnown, p) {
				wantKnown = append(wantKnown, p)
			}
			if i < len(words)-1 && !slices.Contains(wantGroups, p) {
				wantGroups = append(wantGroups, p)
			}
		}
	}
	gotKnown := slices.Sorted(slices.Values(c.known))
	if slices.Sort(wantKnown); !slices.Equal(gotKnown, wantKnown) {
		t.Errorf("$known: %q, want %q", gotKnown, wantKnown)
	}

	var labels []string
	for _, g := range c.groups {
		labels = append(labels, g.label)
		subs, ok, err := psAssigned(g.body, "subs")
		if !ok || err != nil || !subs.isList {
			t.Errorf("group %q: $subs: found %v, %v", g.label, ok, err)
			continue
		}
		var got, want [][2]string
		for _, s := range subs.list {
			pair, err := s.strings()
			if err != nil || len(pair) != 2 {
				t.Errorf("group %q: entry %+v (%v): want @(name, description)", g.label, s, err)
				continue
			}
			got = append(got, [2]string{pair[0], pair[1]})
		}
		for _, k := range kids[g.label] {
			full := strings.TrimPrefix(g.label+" "+k, " ")
			desc, ok := summary[full]
			if !ok {
				desc = full + ": " + strings.Join(kids[full], ", ")
			}
			want = append(want, [2]string{k, desc})
		}
		if !slices.Equal(got, want) {
			t.Errorf("group %q: offers %q, want %q", g.label, got, want)
		}
	}
	if !slices.Equal(labels, wantGroups) {
		t.Errorf("group cases %q, want %q", labels, wantGroups)
	}

	labels = nil
	for _, cc := range c.commands {
		labels = append(labels, cc.label)
		i := slices.IndexFunc(cmds, func(x commandInfo) bool { return x.path == cc.label })
		if i < 0 {
			t.Errorf("command case %q: no such command", cc.label)
			continue
		}
		cmd := cmds[i]
		if !slices.ContainsFunc(cc.body, func(n psNode) bool { return n.isVar("found") }) {
			t.Errorf("%q: does not set $found", cc.label)
		}
		flags, ok, err := psAssigned(cc.body, "flags")
		if !ok || err != nil || !flags.isList {
			t.Errorf("%q: $flags: found %v, %v", cc.label, ok, err)
			continue
		}
		if len(flags.list) != len(cmd.flags) {
			t.Errorf("%q: %d flags, want %d", cc.label, len(flags.list), len(cmd.flags))
		}
		for j, f := range flags.list {
			if j >= len(cmd.flags) {
				break
			}
			wf := cmd.flags[j]
			if !f.isList || len(f.list) != 5 || f.list[0].isList || f.list[1].isList || f.list[2].isList || f.list[3].isList {
				t.Errorf("%q: flag %d: want @(dashed, name, value name, usage, @(values))", cc.label, j)
				continue
			}
			choices, err := f.list[4].strings()
			got := fmt.Sprintf("%q %q %q %q %q", f.list[0].s, f.list[1].s, f.list[2].s, f.list[3].s, choices)
			want := fmt.Sprintf("%q %q %q %q %q", wf.dashed(), wf.name, wf.valueName, wf.usage, wf.choices)
			if err != nil || got != want {
				t.Errorf("%q: flag %d: %s (%v), want %s", cc.label, j, got, err, want)
			}
		}
		operands, ok, err := psAssigned(cc.body, "operands")
		var got, want []string
		if ok {
			if got, err = operands.strings(); err != nil {
				t.Errorf("%q: $operands: %v", cc.label, err)
			}
		}
		if cmd.complete != nil {
			want = cmd.complete()
		}
		if ok != (cmd.complete != nil) || !slices.Equal(got, want) {
			t.Errorf("%q: operands %q (set: %v), want %q", cc.label, got, ok, want)
		}
	}
	var wantCmds []string
	for _, cmd := range cmds {
		wantCmds = append(wantCmds, cmd.path)
	}
	if !slices.Equal(labels, wantCmds) {
		t.Errorf("command cases %q, want %q", labels, wantCmds)
	}
}

func TestPowershellCompletionCarriesEveryCommandFlagAndValue(t *testing.T) {
	script := generated(t, "completion", "powershell")
	if alias := generated(t, "completion", "pwsh"); alias != script {
		t.Errorf("completion pwsh differs from completion powershell")
	}
	cmds, err := describeAll()
	if err != nil {
		t.Fatal(err)
	}
	checkPowershellScript(t, script, cmds)

	// Literally, so that it cannot pass on an empty description.
	c := readPowershellScript(t, script)
	for _, want := range []string{"executor join", "token revoke", "exec"} {
		if !slices.Contains(c.known, want) {
			t.Errorf("$known lacks %q", want)
		}
	}
	found := false
	for _, cc := range c.commands {
		if cc.label != "exec" {
			continue
		}
		flags, _, _ := psAssigned(cc.body, "flags")
		for _, f := range flags.list {
			if f.list[0].s == "--sandbox" {
				got, _ := f.list[4].strings()
				found = slices.Equal(got, []string{"read-only", "workspace-write", "full-access"}) && f.list[2].s == "string"
			}
		}
	}
	if !found {
		t.Errorf("exec --sandbox: no value choices read-only, workspace-write, full-access")
	}
}

// A command table with quotes, dollars, backticks, newlines and non-ASCII
// in every place a string goes comes back out of the script unchanged.
func TestPowershellCompletionQuotesEveryString(t *testing.T) {
	odd := []string{
		"it's", "''", "'", "‘curly’ ‚low‛", "$x `n $(y)", "a\nb", "tab\there", "naïve — ok", "smile \U0001F600", "\"dq\"", "#not a comment", "x\x00y",
	}
	for _, s := range odd {
		nodes, err := psParse(psQuote(s))
		if err != nil {
			t.Errorf("psQuote(%q) = %s: %v", s, psQuote(s), err)
			continue
		}
		v, err := psEvalList(nodes)
		if err != nil || len(v.list) != 1 || v.list[0].s != s {
			t.Errorf("psQuote(%q) = %s reads back as %+v, %v", s, psQuote(s), v, err)
		}
	}
	cmds := []commandInfo{
		{command: command{path: "it's run", summary: odd[3]}, flags: []flagInfo{
			{name: "o'k", valueName: "wo'rd", usage: odd[4], choices: []string{"a b", "c'd", "é"}},
			{name: "q", usage: odd[5]},
		}},
		{command: command{path: "it's walk", summary: odd[8], complete: func() []string { return []string{"x'y", "‘z’"} }}},
		{command: command{path: "naïve", summary: odd[9]}, flags: []flagInfo{{name: "b", usage: odd[10]}}},
	}
	checkPowershellScript(t, powershellCompletion(cmds), cmds)
}

// The checker itself fails on what it is to catch.
func TestPowershellScriptCheckerCatchesMistakes(t *testing.T) {
	for _, bad := range []string{"{ 'a }", "{ ( }", "@('a') )", "\"x\"", "'a' `\n'b'", "<# c #>", "$"} {
		if _, err := psParse(bad); err == nil {
			t.Errorf("psParse(%q): no error", bad)
		}
	}
	cmds, err := describeAll()
	if err != nil {
		t.Fatal(err)
	}
	script := powershellCompletion(cmds)
	if f := failsOn(func(c checker) { checkPowershellScript(c, script, cmds) }); len(f) != 0 {
		t.Fatalf("the real script fails the check: %q", f)
	}
	for name, mangle := range map[string]func(string) string{
		"a flag dropped": func(s string) string {
			return strings.Replace(s, "                ,@('--sandbox'", "                #", 1)
		},
		"a choice dropped":  func(s string) string { return strings.Replace(s, "'read-only', ", "", 1) },
		"a command renamed": func(s string) string { return strings.Replace(s, "'relay init' {", "'relay init2' {", 1) },
		"a case mistyped":   func(s string) string { return strings.Replace(s, "'executor join' {", "'executor Join' {", 1) },
		"a group child dropped": func(s string) string {
			return strings.Replace(s, "                ,@('join', ", "                #,@('join', ", 1)
		},
		"a path unknown":      func(s string) string { return strings.Replace(s, "        'token ls'\n", "", 1) },
		"a variable mistyped": func(s string) string { return strings.Replace(s, "if (-not $found)", "if (-not $fuond)", 1) },
		"a quote unclosed":    func(s string) string { return strings.Replace(s, "'cp'", "'cp", 1) },
		"a brace unclosed":    func(s string) string { return strings.Replace(s, "$found = $true\n", "$found = $true {\n", 1) },
		"non-ASCII":           func(s string) string { return strings.Replace(s, "'demo'", "'d\u00e9mo'", 1) },
		"a quote not doubled": func(s string) string { return strings.Replace(s, "$full = '''' +", "$full = ''' +", 1) },
		"operands dropped":    func(s string) string { return strings.Replace(s, "$operands = @('bash', ", "$operands = @(", 1) },
	} {
		bad := mangle(script)
		if bad == script {
			t.Errorf("%s: the mangling changed nothing", name)
			continue
		}
		if f := failsOn(func(c checker) { checkPowershellScript(c, bad, cmds) }); len(f) == 0 {
			t.Errorf("%s: the check passed", name)
		}
	}
}

// Where a PowerShell is on PATH, the script loads and completes.
func TestPowershellCompletionRunsWherePwshIs(t *testing.T) {
	pwsh, err := exec.LookPath("pwsh")
	if err != nil {
		t.Skip("pwsh is not installed (not in Debian): the script is checked by reading it only")
	}
	script := writeScript(t, "outpost.ps1", generated(t, "completion", "powershell"))
	// TabExpansion2 is what PowerShell's line editor calls on Tab.
	driver := writeScript(t, "driver.ps1", `param($script, $line)
. $script
(TabExpansion2 -inputScript $line -cursorColumn $line.Length).CompletionMatches | ForEach-Object { $_.CompletionText }
`)
	for _, c := range []struct{ line, want string }{
		{"outpost ex", "executors"},
		{"outpost executor j", "join"},
		{"outpost exec --sa", "--sandbox"},
		{"outpost exec --sandbox w", "workspace-write"},
		{"outpost exec --sandbox=r", "--sandbox=read-only"},
		{"outpost cp -", "-r"},
		{"outpost completion p", "powershell"},
	} {
		cmd := exec.Command(pwsh, "-NoProfile", "-NonInteractive", "-File", driver, script, c.line)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		out, err := cmd.Output()
		if err != nil || !slices.Contains(strings.Fields(string(out)), c.want) {
			t.Errorf("pwsh %q: %v, got %q, want %q; stderr %s", c.line, err, out, c.want, errb.String())
		}
	}
}

// Every shell outpost offers writes a script that names it, and the help
// says how to install each.
func TestCompletionWritesEveryShellItOffers(t *testing.T) {
	help := generated(t, "completion", "-h")
	for _, sh := range completionShells {
		head := strings.ToLower(strings.Join(strings.SplitN(generated(t, "completion", sh), "\n", 4)[:3], "\n"))
		if !strings.Contains(head, "# "+sh+" completion for outpost") {
			t.Errorf("completion %s: header %q does not name the shell", sh, head)
		}
		if !strings.Contains(help, "outpost completion "+sh+" ") {
			t.Errorf("help lacks the install line for %s", sh)
		}
	}
	if !strings.Contains(help, "$PROFILE") {
		t.Errorf("help does not say where the PowerShell script goes")
	}
	var out, errb bytes.Buffer
	if code := run([]string{"completion", "tcsh"}, &out, &errb); code != exitUsage || out.Len() != 0 {
		t.Errorf("completion tcsh: exit %d, stdout %q", code, out.String())
	}
}
