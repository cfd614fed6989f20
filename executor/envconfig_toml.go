package executor

// TOML for environmentConfig/read: parse a config file into an ordered
// tree, keep only the paths asked for, and write the tree again the way
// codex's server does (toml-rs's to_string: values before sub-tables,
// keys in file order, a header only for a table that holds values or
// nothing). codex returns the re-serialized projection, not the file's
// text, so comments and formatting are not kept and a client parses what
// it gets with any TOML parser.

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

// tomlTable is a TOML table with its keys in file order. Values are
// *tomlTable, []any (an array; its tables are *tomlTable), string,
// int64, float64, bool or time.Time (BurntSushi's local kinds kept in its
// Location).
type tomlTable struct {
	keys []string
	vals map[string]any
}

func newTomlTable() *tomlTable { return &tomlTable{vals: map[string]any{}} }

func (t *tomlTable) get(k string) (any, bool) { v, ok := t.vals[k]; return v, ok }

func (t *tomlTable) set(k string, v any) {
	if _, ok := t.vals[k]; !ok {
		t.keys = append(t.keys, k)
	}
	t.vals[k] = v
}

func (t *tomlTable) remove(k string) bool {
	if _, ok := t.vals[k]; !ok {
		return false
	}
	delete(t.vals, k)
	t.keys = slices.DeleteFunc(t.keys, func(s string) bool { return s == k })
	return true
}

// tomlParseError is a file that is not valid TOML, with where.
type tomlParseError struct {
	line, col int
	msg       string
}

func (e *tomlParseError) Error() string { return fmt.Sprintf("%d:%d: %s", e.line, e.col, e.msg) }

// maxTOMLDepth bounds how deeply a document nests (dotted key segments,
// header segments, inline tables and arrays): BurntSushi's parser takes
// time quadratic in it (a 4 MiB line of "a.a.a…" would take hours), and
// no codex configuration comes near it.
const maxTOMLDepth = 64

// parseTOML parses a document into an ordered tree.
func parseTOML(text string) (*tomlTable, error) {
	if err := checkTOMLDepth(text); err != nil {
		return nil, err
	}
	var m map[string]any
	md, err := toml.Decode(text, &m)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return nil, &tomlParseError{line: pe.Position.Line, col: pe.Position.Col, msg: pe.Message}
		}
		return nil, err
	}
	// The order of every key (array indices dropped), as written. A
	// table made implicitly by [a.b] has no key of its own: it takes the
	// place of its first descendant.
	order := map[string]int{}
	for i, k := range md.Keys() {
		for n := 1; n <= len(k); n++ {
			p := strings.Join(k[:n], "\x00")
			if _, ok := order[p]; !ok {
				order[p] = i
			}
		}
	}
	return orderedTable(m, "", order), nil
}

// checkTOMLDepth scans text outside strings and comments: the open
// brackets and braces plus the dots of the key being read may not pass
// maxTOMLDepth. One pass, a stack of at most maxTOMLDepth.
func checkTOMLDepth(text string) error {
	line, col, dots := 1, 0, 0
	var stack []byte // open '[' and '{'
	inKey := true    // reading a key (or a header), not a value
	fail := func() error {
		return &tomlParseError{line: line, col: col, msg: fmt.Sprintf("keys, arrays and tables nest more than %d deep", maxTOMLDepth)}
	}
	for i := 0; i < len(text); i++ {
		c := text[i]
		col++
		switch c {
		case '\n':
			line, col, dots = line+1, 0, 0
			inKey = len(stack) == 0
		case '#':
			for i+1 < len(text) && text[i+1] != '\n' {
				i++
			}
		case '"', '\'':
			q := text[i : i+1]
			if strings.HasPrefix(text[i:], q+q+q) {
				end := strings.Index(text[i+3:], q+q+q)
				if end < 0 {
					return nil // unterminated: the parser says so
				}
				skipped := text[i : i+3+end+3]
				line += strings.Count(skipped, "\n")
				i += len(skipped) - 1
				continue
			}
			for i++; i < len(text) && text[i] != c && text[i] != '\n'; i++ {
				if c == '"' && text[i] == '\\' {
					i++
				}
			}
			if i < len(text) && text[i] == '\n' {
				i-- // unterminated: the newline ends the line
			}
		case '.':
			if inKey {
				if dots++; len(stack)+dots+1 > maxTOMLDepth { // segments
					return fail()
				}
			}
		case '=':
			inKey = false
		case '[', '{':
			if len(stack)+dots >= maxTOMLDepth {
				return fail()
			}
			stack = append(stack, c)
			inKey = c == '{' || len(stack) == 1 && inKey // a header, or an inline table's keys
		case ']', '}':
			if len(stack) > 0 {
				stack = stack[:len(stack)-1]
			}
		case ',':
			dots = 0
			inKey = len(stack) > 0 && stack[len(stack)-1] == '{'
		}
	}
	return nil
}

func orderedTable(m map[string]any, prefix string, order map[string]int) *tomlTable {
	t := &tomlTable{vals: make(map[string]any, len(m))}
	for k, v := range m {
		t.keys = append(t.keys, k)
		t.vals[k] = orderedValue(v, childPath(prefix, k), order)
	}
	slices.SortFunc(t.keys, func(a, b string) int {
		oa, okA := order[childPath(prefix, a)]
		ob, okB := order[childPath(prefix, b)]
		switch {
		case okA && okB:
			return oa - ob
		case okA:
			return -1
		case okB:
			return 1
		}
		return strings.Compare(a, b)
	})
	return t
}

func childPath(prefix, k string) string {
	if prefix == "" {
		return k
	}
	return prefix + "\x00" + k
}

func orderedValue(v any, path string, order map[string]int) any {
	switch x := v.(type) {
	case map[string]any:
		return orderedTable(x, path, order)
	case []map[string]any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = orderedTable(e, path, order)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = orderedValue(e, path, order)
		}
		return out
	}
	return v
}

// tomlSelector is the set of paths a projection keeps.
type tomlSelector struct {
	terminal bool
	children map[string]*tomlSelector
}

func newTomlSelector(paths [][]string) *tomlSelector {
	root := &tomlSelector{}
	for _, p := range paths {
		s := root
		for _, seg := range p {
			if s.terminal {
				break
			}
			if s.children == nil {
				s.children = map[string]*tomlSelector{}
			}
			next := s.children[seg]
			if next == nil {
				next = &tomlSelector{}
				s.children[seg] = next
			}
			s = next
		}
		s.terminal, s.children = true, nil
	}
	return root
}

// projectTOML keeps what sel selects; nil when a layer keeps nothing.
func projectTOML(t *tomlTable, sel *tomlSelector) *tomlTable {
	out, _ := projectValue(t, sel).(*tomlTable)
	if !sel.terminal && out != nil && len(out.keys) == 0 {
		return nil
	}
	return out
}

func projectValue(v any, sel *tomlSelector) any {
	t, ok := v.(*tomlTable)
	if sel.terminal || !ok {
		// A selected value whole, or a non-table where a table was
		// asked into: kept, so it still overrides lower layers.
		return v
	}
	out := newTomlTable()
	for _, k := range t.keys {
		if child := sel.children[k]; child != nil {
			out.set(k, projectValue(t.vals[k], child))
		}
	}
	return out
}

// mergeTOML merges src over dst as codex's merge_toml_values does:
// tables merge key by key, anything else replaces.
func mergeTOML(dst, src *tomlTable) {
	for _, k := range src.keys {
		sv := src.vals[k]
		if st, ok := sv.(*tomlTable); ok {
			if dt, ok := dst.vals[k].(*tomlTable); ok {
				mergeTOML(dt, st)
				continue
			}
			cp := newTomlTable()
			mergeTOML(cp, st)
			dst.set(k, cp)
			continue
		}
		dst.set(k, sv)
	}
}

// marshalTOML writes t as a document.
func marshalTOML(t *tomlTable) string {
	var b strings.Builder
	writeTable(&b, nil, t, false)
	return b.String()
}

func isArrayOfTables(v any) bool {
	a, ok := v.([]any)
	if !ok || len(a) == 0 {
		return false
	}
	for _, e := range a {
		if _, ok := e.(*tomlTable); !ok {
			return false
		}
	}
	return true
}

func isSection(v any) bool {
	_, ok := v.(*tomlTable)
	return ok || isArrayOfTables(v)
}

func writeTable(b *strings.Builder, path []string, t *tomlTable, arrayElem bool) {
	var values, sections []string
	for _, k := range t.keys {
		if isSection(t.vals[k]) {
			sections = append(sections, k)
		} else {
			values = append(values, k)
		}
	}
	if len(path) > 0 && (arrayElem || len(values) > 0 || len(t.keys) == 0) {
		if b.Len() > 0 {
			b.WriteByte('\n')
		}
		open, shut := "[", "]"
		if arrayElem {
			open, shut = "[[", "]]"
		}
		b.WriteString(open)
		for i, seg := range path {
			if i > 0 {
				b.WriteByte('.')
			}
			b.WriteString(tomlKey(seg))
		}
		b.WriteString(shut)
		b.WriteByte('\n')
	}
	for _, k := range values {
		b.WriteString(tomlKey(k))
		b.WriteString(" = ")
		writeInline(b, t.vals[k])
		b.WriteByte('\n')
	}
	for _, k := range sections {
		sub := append(slices.Clip(path), k)
		switch v := t.vals[k].(type) {
		case *tomlTable:
			writeTable(b, sub, v, false)
		case []any:
			for _, e := range v {
				writeTable(b, sub, e.(*tomlTable), true)
			}
		}
	}
}

func writeInline(b *strings.Builder, v any) {
	switch x := v.(type) {
	case string:
		b.WriteString(tomlString(x))
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case float64:
		b.WriteString(tomlFloat(x))
	case bool:
		b.WriteString(strconv.FormatBool(x))
	case time.Time:
		b.WriteString(tomlDatetime(x))
	case []any:
		b.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				b.WriteString(", ")
			}
			writeInline(b, e)
		}
		b.WriteByte(']')
	case *tomlTable:
		if len(x.keys) == 0 {
			b.WriteString("{}")
			return
		}
		b.WriteString("{ ")
		for i, k := range x.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(tomlKey(k))
			b.WriteString(" = ")
			writeInline(b, x.vals[k])
		}
		b.WriteString(" }")
	default:
		fmt.Fprintf(b, "%v", x) // not produced by parseTOML
	}
}

func tomlKey(k string) string {
	if k == "" {
		return `""`
	}
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			switch {
			case basicOK(k, false):
				return `"` + k + `"`
			case literalOK(k, false):
				return "'" + k + "'"
			}
			return basicString(k, false)
		}
	}
	return k
}

// tomlString picks a string's form as toml-rs does: the first of basic,
// literal, basic triple-quoted and literal triple-quoted that holds the
// text without escapes (only the triple-quoted forms for text with a
// newline), else a basic string with escapes. (A tab needs no escape
// form: a basic string writes it as \t.)
func tomlString(s string) string {
	if strings.Contains(s, "\n") {
		switch {
		case tripleOK(s, '"'):
			return "\"\"\"\n" + s + "\"\"\""
		case tripleOK(s, '\''):
			return "'''\n" + s + "'''"
		}
		return basicString(s, true)
	}
	switch {
	case basicOK(s, false):
		return basicString(s, false)
	case literalOK(s, false):
		return "'" + s + "'"
	case tripleOK(s, '"'):
		return "\"\"\"" + s + "\"\"\""
	case tripleOK(s, '\''):
		return "'''" + s + "'''"
	}
	return basicString(s, false)
}

// ctlOK reports whether c may stand unescaped in a string (tab always,
// newline in a triple-quoted one).
func ctlOK(c rune, newline bool) bool {
	if c == '\t' || newline && c == '\n' {
		return true
	}
	return c > 0x1f && c != 0x7f
}

func basicOK(s string, newline bool) bool {
	for _, c := range s {
		if c == '"' || c == '\\' || !ctlOK(c, newline) {
			return false
		}
	}
	return true
}

func literalOK(s string, newline bool) bool {
	for _, c := range s {
		if c == '\'' || !ctlOK(c, newline) {
			return false
		}
	}
	return true
}

// tripleOK reports whether s fits between triple quotes q unescaped: no
// run of three q (a trailing run of two still closes right), and for
// the basic form no backslash.
func tripleOK(s string, q rune) bool {
	run := 0
	for _, c := range s {
		if c == q {
			if run++; run >= 3 {
				return false
			}
			continue
		}
		run = 0
		if q == '"' && c == '\\' || !ctlOK(c, true) {
			return false
		}
	}
	return true
}

func basicString(s string, multiline bool) string {
	var b strings.Builder
	if multiline {
		b.WriteString("\"\"\"\n")
	} else {
		b.WriteByte('"')
	}
	for _, c := range s {
		switch {
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n' && multiline:
			b.WriteByte('\n')
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c == '"':
			b.WriteString(`\"`)
		case c == '\\':
			b.WriteString(`\\`)
		case c <= 0x1f || c == 0x7f:
			fmt.Fprintf(&b, `\u%04X`, c)
		default:
			b.WriteRune(c)
		}
	}
	if multiline {
		b.WriteString(`"""`)
	} else {
		b.WriteByte('"')
	}
	return b.String()
}

// tomlFloat writes a float as Rust's Display does (shortest round trip,
// never an exponent), with ".0" on whole numbers.
func tomlFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "nan" // toml-rs drops a NaN's sign
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// tomlDatetime writes a date-time in its own kind: local date, local
// time, local date-time, or with its offset ("Z" for UTC).
func tomlDatetime(t time.Time) string {
	frac := ""
	if ns := t.Nanosecond(); ns != 0 {
		frac = "." + strings.TrimRight(fmt.Sprintf("%09d", ns), "0")
	}
	// BurntSushi marks the local kinds by their Location's name.
	switch t.Location().String() {
	case "date-local":
		return t.Format("2006-01-02")
	case "time-local":
		return t.Format("15:04:05") + frac
	case "datetime-local":
		return t.Format("2006-01-02T15:04:05") + frac
	}
	if t.Location() == time.UTC {
		return t.Format("2006-01-02T15:04:05") + frac + "Z"
	}
	_, off := t.Zone()
	sign := '+'
	if off < 0 {
		sign, off = '-', -off
	}
	return t.Format("2006-01-02T15:04:05") + frac + fmt.Sprintf("%c%02d:%02d", sign, off/3600, off/60%60)
}
