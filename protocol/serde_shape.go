package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A shape describes a wire value the way codex's serde-derived decoder
// sees it, so that outpost refuses exactly the values codex's server
// refuses, with the same words ("missing field `scopeId`", "invalid type:
// number, expected struct ExecMetadata"). encoding/json is laxer (it skips
// missing fields, and fills a struct from null) and words its errors for
// Go; a shape check runs before it on the params that need codex's
// strictness.
type shape struct {
	kind shapeKind
	// name is the Rust type's name, for "expected struct X" (structs and
	// path maps).
	name string
	// fields are a struct's, in declaration order (serde reports missing
	// fields and fills a sequence form in that order).
	fields []shapeField
	// variants are an enum's unit variants.
	variants []string
	// elem is a map's value shape.
	elem *shape
	// counted: codex buffers these values before decoding them, and then
	// names a bad number by its value ("integer `5`"), not "number".
	counted bool
}

type shapeKind int

const (
	shapeString shapeKind = iota
	shapeBool
	shapeU64
	shapeUUID   // a string that parses as a UUID
	shapeStruct // an object, or its fields in order as an array
	shapeEnum   // "variant", or {"variant": null}
	shapeMap    // an object of elem values; "expected a map"
	shapePaths  // a struct holding an object of elem values; "expected struct name"
)

// shapeField is one field of a struct shape.
type shapeField struct {
	name  string
	shape *shape
	// option: null is allowed and the field may be missing (serde's
	// Option<T>).
	option bool
	// dflt: the field may be missing, also from a sequence form
	// (#[serde(default)]).
	dflt bool
}

// shapeError is a refusal worded as codex's decoder words it.
type shapeError string

func (e shapeError) Error() string { return string(e) }

// maxShapeDepth bounds the nesting a shape check parses, as codex's JSON
// parser bounds it (serde_json stops at 128).
const maxShapeDepth = 128

// jvalue is a parsed JSON value that keeps an object's keys in document
// order: serde decodes a struct's fields in the order they arrive, so the
// first bad one is the one it names.
type jvalue struct {
	kind byte // 'n' null, 'b' bool, 'd' number, 's' string, 'a' array, 'o' object
	b    bool
	s    string // a string, or a number's text
	arr  []jvalue
	keys []string
	vals []jvalue
}

// parseJValue reads one value from dec (UseNumber set).
func parseJValue(dec *json.Decoder, depth int) (jvalue, error) {
	if depth > maxShapeDepth {
		return jvalue{}, shapeError("recursion limit exceeded")
	}
	tok, err := dec.Token()
	if err != nil {
		return jvalue{}, err
	}
	switch t := tok.(type) {
	case nil:
		return jvalue{kind: 'n'}, nil
	case bool:
		return jvalue{kind: 'b', b: t}, nil
	case json.Number:
		return jvalue{kind: 'd', s: t.String()}, nil
	case string:
		return jvalue{kind: 's', s: t}, nil
	case json.Delim:
		switch t {
		case '[':
			v := jvalue{kind: 'a'}
			for dec.More() {
				e, err := parseJValue(dec, depth+1)
				if err != nil {
					return jvalue{}, err
				}
				v.arr = append(v.arr, e)
			}
			_, err := dec.Token()
			return v, err
		case '{':
			v := jvalue{kind: 'o'}
			for dec.More() {
				k, err := dec.Token()
				if err != nil {
					return jvalue{}, err
				}
				key, _ := k.(string)
				e, err := parseJValue(dec, depth+1)
				if err != nil {
					return jvalue{}, err
				}
				v.keys, v.vals = append(v.keys, key), append(v.vals, e)
			}
			_, err := dec.Token()
			return v, err
		}
	}
	return jvalue{}, fmt.Errorf("unexpected JSON token %v", tok)
}

// unexpected names v as serde's "invalid type" errors do.
func (v *jvalue) unexpected(counted bool) string {
	switch v.kind {
	case 'n':
		return "null"
	case 'b':
		return fmt.Sprintf("boolean `%t`", v.b)
	case 'd':
		if !counted {
			return "number"
		}
		if _, err := strconv.ParseInt(v.s, 10, 64); err == nil {
			return "integer `" + v.s + "`"
		}
		if _, err := strconv.ParseUint(v.s, 10, 64); err == nil {
			return "integer `" + v.s + "`"
		}
		f, _ := strconv.ParseFloat(v.s, 64)
		s := strconv.FormatFloat(f, 'f', -1, 64)
		if !strings.ContainsAny(s, ".eEIN") {
			s += ".0" // Rust prints a float with its decimal point
		}
		return "floating point `" + s + "`"
	case 's':
		return "string " + strconv.Quote(v.s)
	case 'a':
		return "sequence"
	}
	return "map"
}

// expecting is what serde says it expected instead.
func (s *shape) expecting() string {
	switch s.kind {
	case shapeString, shapeUUID:
		return "a string"
	case shapeBool:
		return "a boolean"
	case shapeU64:
		return "u64"
	case shapeStruct, shapePaths:
		return "struct " + s.name
	case shapeEnum:
		return "string or map"
	}
	return "a map"
}

func invalidType(v *jvalue, s *shape, counted bool) error {
	return shapeError("invalid type: " + v.unexpected(counted) + ", expected " + s.expecting())
}

// check reports the first way v does not fit s, as codex's decoder would.
func (s *shape) check(v *jvalue) error {
	switch s.kind {
	case shapeString:
		if v.kind != 's' {
			return invalidType(v, s, s.counted)
		}
	case shapeUUID:
		if v.kind != 's' {
			return invalidType(v, s, s.counted)
		}
		return checkUUID(v.s)
	case shapeBool:
		if v.kind != 'b' {
			return invalidType(v, s, s.counted)
		}
	case shapeU64:
		if v.kind != 'd' {
			return invalidType(v, s, s.counted)
		}
		if _, err := strconv.ParseUint(v.s, 10, 64); err != nil {
			return shapeError("invalid number")
		}
	case shapeEnum:
		return s.checkEnum(v)
	case shapeMap, shapePaths:
		if v.kind != 'o' {
			return invalidType(v, s, s.counted)
		}
		for i := range v.vals {
			if err := s.elem.check(&v.vals[i]); err != nil {
				return err
			}
		}
	case shapeStruct:
		return s.checkStruct(v)
	}
	return nil
}

func (s *shape) checkEnum(v *jvalue) error {
	switch v.kind {
	case 's':
		return s.variant(v.s)
	case 'o':
		if len(v.keys) != 1 {
			return shapeError("invalid value: map, expected map with a single key")
		}
		if err := s.variant(v.keys[0]); err != nil {
			return err
		}
		if v.vals[0].kind != 'n' {
			return shapeError("invalid type: " + v.vals[0].unexpected(s.counted) + ", expected unit")
		}
		return nil
	}
	return invalidType(v, s, s.counted)
}

// variant refuses a name that is not one of s's variants, listing them as
// serde does.
func (s *shape) variant(name string) error {
	for _, known := range s.variants {
		if name == known {
			return nil
		}
	}
	quoted := make([]string, len(s.variants))
	for i, known := range s.variants {
		quoted[i] = "`" + known + "`"
	}
	var expected string
	switch len(quoted) {
	case 0:
		expected = "there are no variants"
	case 1:
		expected = "expected " + quoted[0]
	case 2:
		expected = "expected " + quoted[0] + " or " + quoted[1]
	default:
		expected = "expected one of " + strings.Join(quoted, ", ")
	}
	return shapeError(fmt.Sprintf("unknown variant `%s`, %s", name, expected))
}

func (s *shape) checkStruct(v *jvalue) error {
	switch v.kind {
	case 'o':
		seen := make([]bool, len(s.fields))
		for i, key := range v.keys {
			f := s.field(key)
			if f < 0 {
				continue // serde ignores fields it does not know
			}
			if seen[f] {
				return shapeError("duplicate field `" + key + "`")
			}
			seen[f] = true
			if err := s.fields[f].check(&v.vals[i]); err != nil {
				return err
			}
		}
		for f, field := range s.fields {
			if !seen[f] && !field.option && !field.dflt {
				return shapeError("missing field `" + field.name + "`")
			}
		}
		return nil
	case 'a':
		// serde also fills a struct from its fields in order.
		for f, field := range s.fields {
			if f >= len(v.arr) {
				if field.dflt {
					continue
				}
				return shapeError(fmt.Sprintf("invalid length %d, expected struct %s with %d elements", len(v.arr), s.name, len(s.fields)))
			}
			if err := field.check(&v.arr[f]); err != nil {
				return err
			}
		}
		if len(v.arr) > len(s.fields) {
			return shapeError(fmt.Sprintf("invalid length %d, expected fewer elements in array", len(v.arr)))
		}
		return nil
	}
	return invalidType(v, s, s.counted)
}

func (s *shape) field(name string) int {
	for i := range s.fields {
		if s.fields[i].name == name {
			return i
		}
	}
	return -1
}

func (f *shapeField) check(v *jvalue) error {
	if f.option && v.kind == 'n' {
		return nil
	}
	return f.shape.check(v)
}

// checkObjectFields checks the named top-level fields of the JSON object
// raw against their shapes, in document order. Other fields are skipped
// (the caller's own decoding judges them); raw that is not an object is
// left to the caller too.
func checkObjectFields(raw []byte, fields map[string]*shapeField) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil
	}
	seen := map[string]bool{}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return nil
		}
		key, _ := k.(string)
		f := fields[key]
		if f == nil {
			var skip json.RawMessage
			if err := dec.Decode(&skip); err != nil {
				return nil
			}
			continue
		}
		if seen[key] {
			return shapeError("duplicate field `" + key + "`")
		}
		seen[key] = true
		v, err := parseJValue(dec, 1)
		if err != nil {
			var se shapeError
			if errors.As(err, &se) {
				return se
			}
			return nil // malformed JSON: the caller's decoding says so
		}
		if err := f.check(&v); err != nil {
			return err
		}
	}
	return nil
}

// checkUUID accepts what codex's UUID parser accepts (32 hex digits, the
// hyphenated form, braced, or with a urn:uuid: prefix) and otherwise
// explains the first fault as that parser does, offsets counted from 1.
func checkUUID(s string) error {
	if uuidOK(s) {
		return nil
	}
	body, offset, simple := s, 0, true
	switch {
	case len(s) >= 2 && s[0] == '{' && s[len(s)-1] == '}':
		body, offset, simple = s[1:len(s)-1], 1, false
	case strings.HasPrefix(s, "urn:uuid:"):
		body, offset, simple = s[len("urn:uuid:"):], len("urn:uuid:"), false
	}
	hyphens := 0
	var bounds [4]int
	for i, r := range body {
		switch {
		case r == '-':
			if hyphens < 4 {
				bounds[hyphens] = i
			}
			hyphens++
		case r >= 0x80 || !isHex(byte(r)):
			return shapeError(fmt.Sprintf("invalid character: expected an optional prefix of `urn:uuid:` followed by [0-9a-fA-F-], found `%c` at %d", r, i+offset+1))
		}
	}
	if hyphens == 0 && simple {
		return shapeError(fmt.Sprintf("invalid length: expected length 32 for simple format, found %d", len(s)))
	}
	if hyphens != 4 {
		return shapeError(fmt.Sprintf("invalid group count: expected 5, found %d", hyphens+1))
	}
	starts := [5]int{0, 9, 14, 19, 24}
	want := [5]int{8, 4, 4, 4, 12}
	for g := 0; g < 4; g++ {
		if bounds[g] != starts[g+1]-1 {
			return shapeError(fmt.Sprintf("invalid group length in group %d: expected %d, found %d", g, want[g], bounds[g]-starts[g]))
		}
	}
	// The parser's own quirk: the last group's length counts the whole
	// input, prefix included.
	return shapeError(fmt.Sprintf("invalid group length in group 4: expected 12, found %d", len(s)-starts[4]))
}

// uuidOK reports whether s is a UUID in one of the accepted forms.
func uuidOK(s string) bool {
	switch len(s) {
	case 32:
		return allHex(s)
	case 36:
		return hyphenated(s)
	case 38:
		return s[0] == '{' && s[37] == '}' && hyphenated(s[1:37])
	case 45:
		return strings.HasPrefix(s, "urn:uuid:") && hyphenated(s[9:])
	}
	return false
}

func hyphenated(s string) bool {
	if len(s) != 36 {
		return false
	}
	for i := 0; i < 36; i++ {
		if i == 8 || i == 13 || i == 18 || i == 23 {
			if s[i] != '-' {
				return false
			}
		} else if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func allHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if !isHex(s[i]) {
			return false
		}
	}
	return true
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}
