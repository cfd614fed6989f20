package main

import "testing"

// On Windows, drive letters and UNC shares are local paths, and '\'
// before the first ':' makes an operand local as '/' does.
func TestParseOperandWindowsPaths(t *testing.T) {
	for in, want := range map[string]cpOperand{
		`C:\Users\me\f.txt`:   {path: `C:\Users\me\f.txt`},
		`c:/Users/me`:         {path: `c:/Users/me`},
		`D:relative`:          {path: `D:relative`},
		`\\server\share\f`:    {path: `\\server\share\f`},
		`.\odd:name`:          {path: `.\odd:name`},
		`dir\sub:x`:           {path: `dir\sub:x`},
		`linux-1:/tmp/x`:      {remote: true, executor: "linux-1", path: "/tmp/x"},
		`:relative/remote`:    {remote: true, path: "relative/remote"},
		`host-a:C:\not-local`: {remote: true, executor: "host-a", path: `C:\not-local`},
	} {
		if got := parseOperand(in); got != want {
			t.Errorf("parseOperand(%q) = %+v, want %+v", in, got, want)
		}
	}
}
