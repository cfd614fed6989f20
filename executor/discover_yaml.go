package executor

// A small YAML reader for skill metadata: SKILL.md's front matter and
// agents/openai.yaml. It reads the block style those files use — nested
// mappings, "- " sequences (of scalars or mappings), plain, quoted and
// block (| and >) scalars, one-line flow [a, b] and {k: v}, comments —
// and refuses the rest (anchors, tags, multi-document streams, tabs as
// indentation) as invalid, as a file codex cannot use is invalid. Like
// codex's parser after its repair pass, a plain value may contain ": "
// ("description: Build for AWS: ECS").
//
// Bounds: the input is at most one skill file (maxSkillFileBytes); the
// nesting depth at most maxYAMLDepth.

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

const maxYAMLDepth = 32

// yScalar is a scalar with whether it was plain (unquoted): only a plain
// scalar can be a boolean, number or null.
type yScalar struct {
	s     string
	plain bool
}

type yLine struct {
	indent int
	text   string // without indentation and trailing comment
	raw    string // the whole line, for block scalars
	num    int
}

var errYAML = errors.New("invalid YAML")

func yamlErr(l yLine, format string, args ...any) error {
	return fmt.Errorf("%w at line %d: %s", errYAML, l.num, fmt.Sprintf(format, args...))
}

// parseYAML parses a document: a mapping, a sequence, a scalar, or nil
// for an empty one. Mappings are map[string]any, sequences []any.
func parseYAML(src string) (any, error) {
	var lines []yLine
	for i, raw := range strings.Split(strings.ReplaceAll(src, "\r\n", "\n"), "\n") {
		n := 0
		for n < len(raw) && raw[n] == ' ' {
			n++
		}
		text := stripComment(raw[n:])
		if strings.HasPrefix(text, "\t") {
			return nil, fmt.Errorf("%w at line %d: tab in indentation", errYAML, i+1)
		}
		lines = append(lines, yLine{indent: n, text: strings.TrimRight(text, " \t"), raw: raw, num: i + 1})
	}
	p := &yParser{lines: lines}
	p.skipBlank()
	if p.i >= len(p.lines) {
		return nil, nil
	}
	l := p.lines[p.i]
	if strings.HasPrefix(l.text, "---") || strings.HasPrefix(l.text, "%") {
		return nil, yamlErr(l, "directives and multiple documents are not supported")
	}
	v, err := p.node(l.indent, 0)
	if err != nil {
		return nil, err
	}
	p.skipBlank()
	if p.i < len(p.lines) {
		return nil, yamlErr(p.lines[p.i], "unexpected indentation")
	}
	return v, nil
}

// stripComment cuts a comment: '#' at the start or after a blank,
// outside quotes.
func stripComment(s string) string {
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				if quote == '\'' && i+1 < len(s) && s[i+1] == '\'' {
					i++
					continue
				}
				quote = 0
			} else if c == '\\' && quote == '"' {
				i++
			}
		case c == '#' && (i == 0 || s[i-1] == ' ' || s[i-1] == '\t'):
			return s[:i]
		case (c == '"' || c == '\'') && (i == 0 || strings.IndexByte(" :[{,-", s[i-1]) >= 0):
			quote = c
		}
	}
	return s
}

type yParser struct {
	lines []yLine
	i     int
}

func (p *yParser) skipBlank() {
	for p.i < len(p.lines) && p.lines[p.i].text == "" {
		p.i++
	}
}

// node parses the block at indent, starting at the current line.
func (p *yParser) node(indent, depth int) (any, error) {
	if depth > maxYAMLDepth {
		return nil, yamlErr(p.lines[p.i], "nested too deeply")
	}
	l := p.lines[p.i]
	if isSeqItem(l.text) {
		return p.sequence(indent, depth)
	}
	if _, _, ok := splitKey(l.text); ok {
		return p.mapping(indent, depth)
	}
	// A lone scalar, possibly over several lines.
	p.i++
	return p.scalarWithContinuation(l.text, indent-1, l)
}

func isSeqItem(t string) bool { return t == "-" || strings.HasPrefix(t, "- ") }

func (p *yParser) sequence(indent, depth int) (any, error) {
	out := []any{}
	for {
		p.skipBlank()
		if p.i >= len(p.lines) {
			return out, nil
		}
		l := p.lines[p.i]
		if l.indent < indent {
			return out, nil
		}
		if l.indent > indent || !isSeqItem(l.text) {
			return nil, yamlErr(l, "expected a sequence item")
		}
		rest := strings.TrimLeft(strings.TrimPrefix(l.text, "-"), " ")
		if rest == "" {
			p.i++
			v, err := p.child(indent, depth)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
			continue
		}
		// "- key: v" starts a mapping indented past the dash; "- - x" a
		// nested sequence.
		inner := l.indent + (len(l.text) - len(rest))
		p.lines[p.i] = yLine{indent: inner, text: rest, raw: l.raw, num: l.num}
		v, err := p.node(inner, depth+1)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
}

// child parses the value block under a line at indent: deeper lines,
// or a sequence at the same indent (YAML lets "key:\n- a" be a list).
func (p *yParser) child(indent, depth int) (any, error) {
	p.skipBlank()
	if p.i >= len(p.lines) {
		return nil, nil
	}
	l := p.lines[p.i]
	if l.indent > indent {
		return p.node(l.indent, depth+1)
	}
	return nil, nil
}

func (p *yParser) mapping(indent, depth int) (any, error) {
	out := map[string]any{}
	for {
		p.skipBlank()
		if p.i >= len(p.lines) {
			return out, nil
		}
		l := p.lines[p.i]
		if l.indent < indent {
			return out, nil
		}
		if l.indent > indent {
			return nil, yamlErr(l, "unexpected indentation")
		}
		key, val, ok := splitKey(l.text)
		if !ok {
			return nil, yamlErr(l, "expected a key")
		}
		if _, dup := out[key]; dup {
			return nil, yamlErr(l, "duplicate key %q", key)
		}
		p.i++
		var v any
		var err error
		switch {
		case val == "":
			p.skipBlank()
			if p.i < len(p.lines) && p.lines[p.i].indent == indent && isSeqItem(p.lines[p.i].text) {
				v, err = p.sequence(indent, depth+1)
			} else {
				v, err = p.child(indent, depth)
			}
		case val[0] == '|' || val[0] == '>':
			v, err = p.blockScalar(val, indent, l)
		default:
			v, err = p.scalarWithContinuation(val, indent, l)
		}
		if err != nil {
			return nil, err
		}
		out[key] = v
	}
}

// splitKey splits "key: value" (or "key:"); a quoted key may hold ':'.
func splitKey(t string) (key, val string, ok bool) {
	if t == "" || isSeqItem(t) || t[0] == '[' || t[0] == '{' {
		return "", "", false
	}
	if t[0] == '"' || t[0] == '\'' {
		end := closingQuote(t)
		if end < 0 || end+1 >= len(t) || t[end+1] != ':' {
			return "", "", false
		}
		k, err := parseQuoted(t[:end+1])
		if err != nil {
			return "", "", false
		}
		rest := t[end+2:]
		if rest != "" && rest[0] != ' ' {
			return "", "", false
		}
		return k, strings.TrimSpace(rest), true
	}
	for i := 0; i < len(t); i++ {
		if t[i] == ':' && (i+1 == len(t) || t[i+1] == ' ') {
			return strings.TrimSpace(t[:i]), strings.TrimSpace(t[i+1:]), i > 0
		}
	}
	return "", "", false
}

func closingQuote(t string) int {
	q := t[0]
	for i := 1; i < len(t); i++ {
		switch {
		case q == '"' && t[i] == '\\':
			i++
		case t[i] == q:
			if q == '\'' && i+1 < len(t) && t[i+1] == '\'' {
				i++
				continue
			}
			return i
		}
	}
	return -1
}

// scalarWithContinuation parses an inline value; a plain one may go on
// over deeper lines, folded with spaces.
func (p *yParser) scalarWithContinuation(val string, indent int, l yLine) (any, error) {
	if val[0] == '"' || val[0] == '\'' {
		if closingQuote(val) != len(val)-1 {
			return nil, yamlErr(l, "unterminated or trailing text after a quoted scalar")
		}
		s, err := parseQuoted(val)
		if err != nil {
			return nil, yamlErr(l, "%v", err)
		}
		return yScalar{s: s}, nil
	}
	if val[0] == '[' || val[0] == '{' {
		if v, err := parseFlow(val); err == nil {
			return v, nil
		}
		// Not valid flow: codex's repair reads it as text.
	}
	if strings.HasPrefix(val, "&") || strings.HasPrefix(val, "*") || strings.HasPrefix(val, "!") {
		return nil, yamlErr(l, "anchors, aliases and tags are not supported")
	}
	parts := []string{val}
	for p.i < len(p.lines) {
		n := p.lines[p.i]
		if n.text == "" || n.indent <= indent {
			break
		}
		if _, _, ok := splitKey(n.text); ok {
			return nil, yamlErr(n, "mapping values are not allowed here")
		}
		parts = append(parts, n.text)
		p.i++
	}
	return yScalar{s: strings.Join(parts, " "), plain: true}, nil
}

// blockScalar reads a | or > scalar: the lines deeper than the key.
func (p *yParser) blockScalar(header string, indent int, l yLine) (any, error) {
	folded := header[0] == '>'
	chomp := byte(0)
	for _, c := range []byte(header[1:]) {
		switch {
		case c == '-' || c == '+':
			chomp = c
		case c >= '1' && c <= '9':
		default:
			return nil, yamlErr(l, "invalid block scalar header %q", header)
		}
	}
	var body []string
	contentIndent := -1
	for p.i < len(p.lines) {
		raw := p.lines[p.i].raw
		trimmed := strings.TrimLeft(raw, " ")
		n := len(raw) - len(trimmed)
		if strings.TrimSpace(raw) == "" {
			body = append(body, "")
			p.i++
			continue
		}
		if n <= indent {
			break
		}
		if contentIndent < 0 {
			contentIndent = n
		}
		if n < contentIndent {
			return nil, yamlErr(p.lines[p.i], "less indented line in a block scalar")
		}
		body = append(body, raw[contentIndent:])
		p.i++
	}
	trailing := 0
	for len(body) > 0 && body[len(body)-1] == "" {
		body = body[:len(body)-1]
		trailing++
	}
	var s string
	if folded {
		s = strings.Join(body, " ")
	} else {
		s = strings.Join(body, "\n")
	}
	switch {
	case len(body) == 0:
	case chomp == '-':
	case chomp == '+':
		s += "\n" + strings.Repeat("\n", trailing)
	default:
		s += "\n"
	}
	return yScalar{s: s}, nil
}

func parseQuoted(t string) (string, error) {
	if t[0] == '\'' {
		return strings.ReplaceAll(t[1:len(t)-1], "''", "'"), nil
	}
	body := t[1 : len(t)-1]
	var b strings.Builder
	for i := 0; i < len(body); i++ {
		c := body[i]
		if c != '\\' {
			b.WriteByte(c)
			continue
		}
		i++
		if i >= len(body) {
			return "", errors.New("dangling escape")
		}
		switch body[i] {
		case 'n':
			b.WriteByte('\n')
		case 't', '\t':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case '0':
			b.WriteByte(0)
		case '"', '\\', '/', ' ':
			b.WriteByte(body[i])
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[body[i]]
			if i+1+n > len(body) {
				return "", errors.New("short escape")
			}
			r, err := strconv.ParseUint(body[i+1:i+1+n], 16, 32)
			if err != nil || !utf8.ValidRune(rune(r)) {
				return "", errors.New("invalid escape")
			}
			b.WriteRune(rune(r))
			i += n
		default:
			return "", fmt.Errorf("unknown escape \\%c", body[i])
		}
	}
	return b.String(), nil
}

// parseFlow parses a one-line [..] or {..} of scalars and nested flows.
func parseFlow(t string) (any, error) {
	v, rest, err := flowValue(strings.TrimSpace(t), 0)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(rest) != "" {
		return nil, errors.New("trailing text after a flow collection")
	}
	return v, nil
}

func flowValue(t string, depth int) (any, string, error) {
	if depth > maxYAMLDepth {
		return nil, "", errors.New("nested too deeply")
	}
	t = strings.TrimLeft(t, " ")
	if t == "" {
		return nil, "", errors.New("missing value")
	}
	switch t[0] {
	case '[', '{':
		isMap := t[0] == '{'
		end := byte(']')
		if isMap {
			end = '}'
		}
		seq, m := []any{}, map[string]any{}
		t = strings.TrimLeft(t[1:], " ")
		for {
			if t == "" {
				return nil, "", errors.New("unterminated flow collection")
			}
			if t[0] == end {
				if isMap {
					return m, t[1:], nil
				}
				return seq, t[1:], nil
			}
			if isMap {
				kv, rest, err := flowValue(t, depth+1)
				if err != nil {
					return nil, "", err
				}
				ks, ok := kv.(yScalar)
				rest = strings.TrimLeft(rest, " ")
				if !ok || !strings.HasPrefix(rest, ":") {
					return nil, "", errors.New("expected key: value")
				}
				v, rest2, err := flowValue(rest[1:], depth+1)
				if err != nil {
					return nil, "", err
				}
				m[ks.s], t = v, rest2
			} else {
				v, rest, err := flowValue(t, depth+1)
				if err != nil {
					return nil, "", err
				}
				seq, t = append(seq, v), rest
			}
			t = strings.TrimLeft(t, " ")
			if strings.HasPrefix(t, ",") {
				t = strings.TrimLeft(t[1:], " ")
			} else if t == "" || t[0] != end {
				return nil, "", errors.New("expected , or the end of the collection")
			}
		}
	case '"', '\'':
		end := closingQuote(t)
		if end < 0 {
			return nil, "", errors.New("unterminated quoted scalar")
		}
		s, err := parseQuoted(t[:end+1])
		return yScalar{s: s}, t[end+1:], err
	}
	i := 0
	for i < len(t) && !strings.ContainsRune(",]}", rune(t[i])) && !(t[i] == ':' && (i+1 == len(t) || t[i+1] == ' ')) {
		i++
	}
	return yScalar{s: strings.TrimSpace(t[:i]), plain: true}, t[i:], nil
}

// yamlString reads a string field; absent or null is ("", false).
func yamlString(v any) (string, bool, error) {
	switch x := v.(type) {
	case nil:
		return "", false, nil
	case yScalar:
		if x.plain && (x.s == "" || x.s == "~" || strings.EqualFold(x.s, "null")) {
			return "", false, nil
		}
		if x.plain && isYAMLBool(x.s) {
			return "", false, errors.New("invalid type: boolean, expected a string")
		}
		return x.s, true, nil
	}
	return "", false, errors.New("invalid type: expected a string")
}

func isYAMLBool(s string) bool {
	switch s {
	case "true", "True", "TRUE", "false", "False", "FALSE":
		return true
	}
	return false
}

// yamlBool reads an optional boolean field.
func yamlBool(v any) (*bool, error) {
	if v == nil {
		return nil, nil
	}
	x, ok := v.(yScalar)
	if ok && x.plain {
		if x.s == "" || x.s == "~" || strings.EqualFold(x.s, "null") {
			return nil, nil
		}
		if isYAMLBool(x.s) {
			b := strings.EqualFold(x.s, "true")
			return &b, nil
		}
	}
	return nil, errors.New("invalid type: expected a boolean")
}

// yamlMap reads an optional mapping field.
func yamlMap(v any) (map[string]any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		return x, nil
	case yScalar:
		if x.plain && (x.s == "" || x.s == "~" || strings.EqualFold(x.s, "null")) {
			return nil, nil
		}
	}
	return nil, errors.New("invalid type: expected a mapping")
}

// yamlSeq reads an optional sequence field.
func yamlSeq(v any) ([]any, error) {
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []any:
		return x, nil
	case yScalar:
		if x.plain && (x.s == "" || x.s == "~" || strings.EqualFold(x.s, "null")) {
			return nil, nil
		}
	}
	return nil, errors.New("invalid type: expected a sequence")
}
