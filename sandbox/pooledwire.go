package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The request a pooled helper reads (pooled_linux.go), in a compact binary
// form: decoding it is on every pooled start's path, and JSON's reflection
// took ~0.15 ms there against ~0.01 ms for this. All integers are
// little-endian; a string is a u32 length and its bytes; a list is a u32
// count and its strings.
//
//	u8  version (pooledWireVersion)
//	u8  flags: 1 tty, 2 network, 4 fullWrite, 8 mountNamespace, 16 denySetID
//	u16 files: descriptors sent with the request (3 stdio + the mounts)
//	u64 ×3 limits: open files, file size, processes
//	str arg0, dir
//	list readOnly, readWrite, none, protected
//	u32 mounts, then each: str path, i32 fd, u8 readOnly
//	list argv (HelperName, "--", the command), env

const pooledWireVersion = 1

// pooledRequest is one command for a pooled helper.
type pooledRequest struct {
	Spec spec
	Argv []string // HelperName, "--", the command
	Env  []string
	Tty  bool
	// Files counts the descriptors sent with the request: 3 (stdio) plus
	// one per mount whose FD names it (3 for the first, as in a
	// per-command helper's fd table).
	Files int
}

const (
	wireTTY = 1 << iota
	wireNetwork
	wireFullWrite
	wireMountNamespace
	wireDenySetID
)

var errPooledWire = errors.New("sandbox: bad pooled helper request")

func appendWireString(b []byte, s string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendWireList(b []byte, l []string) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(l)))
	for _, s := range l {
		b = appendWireString(b, s)
	}
	return b
}

// encode appends r in the wire form.
func (r pooledRequest) encode(b []byte) []byte {
	var flags byte
	for _, f := range []struct {
		on  bool
		bit byte
	}{{r.Tty, wireTTY}, {r.Spec.Network, wireNetwork}, {r.Spec.FullWrite, wireFullWrite}, {r.Spec.MountNamespace, wireMountNamespace}, {r.Spec.DenySetID, wireDenySetID}} {
		if f.on {
			flags |= f.bit
		}
	}
	b = append(b, pooledWireVersion, flags)
	b = binary.LittleEndian.AppendUint16(b, uint16(r.Files))
	b = binary.LittleEndian.AppendUint64(b, r.Spec.Limits.OpenFiles)
	b = binary.LittleEndian.AppendUint64(b, r.Spec.Limits.FileSize)
	b = binary.LittleEndian.AppendUint64(b, r.Spec.Limits.Processes)
	b = appendWireString(b, r.Spec.Arg0)
	b = appendWireString(b, r.Spec.Dir)
	for _, l := range [][]string{r.Spec.ReadOnly, r.Spec.ReadWrite, r.Spec.None, r.Spec.Protected} {
		b = appendWireList(b, l)
	}
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.Spec.Mounts)))
	for _, m := range r.Spec.Mounts {
		b = appendWireString(b, m.Path)
		b = binary.LittleEndian.AppendUint32(b, uint32(int32(m.FD)))
		ro := byte(0)
		if m.ReadOnly {
			ro = 1
		}
		b = append(b, ro)
	}
	b = appendWireList(b, r.Argv)
	return appendWireList(b, r.Env)
}

// wireReader reads the wire form; the first error sticks.
type wireReader struct {
	b   []byte
	err error
}

func (w *wireReader) take(n int) []byte {
	if w.err != nil {
		return nil
	}
	if n < 0 || n > len(w.b) {
		w.err = fmt.Errorf("%w: truncated", errPooledWire)
		return nil
	}
	v := w.b[:n]
	w.b = w.b[n:]
	return v
}

func (w *wireReader) u8() byte {
	if v := w.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (w *wireReader) u16() uint16 {
	if v := w.take(2); v != nil {
		return binary.LittleEndian.Uint16(v)
	}
	return 0
}

func (w *wireReader) u32() uint32 {
	if v := w.take(4); v != nil {
		return binary.LittleEndian.Uint32(v)
	}
	return 0
}

func (w *wireReader) u64() uint64 {
	if v := w.take(8); v != nil {
		return binary.LittleEndian.Uint64(v)
	}
	return 0
}

func (w *wireReader) str() string {
	n := w.u32()
	if uint64(n) > uint64(len(w.b)) {
		w.take(len(w.b) + 1)
		return ""
	}
	return string(w.take(int(n)))
}

func (w *wireReader) list() []string {
	n := w.u32()
	// Every string takes at least its 4-byte length: a count past what
	// is left is a lie, refused before anything is allocated for it.
	if uint64(n)*4 > uint64(len(w.b)) {
		w.take(len(w.b) + 1)
		return nil
	}
	var l []string
	if n > 0 {
		l = make([]string, n)
	}
	for i := range l {
		l[i] = w.str()
	}
	return l
}

// decodePooledRequest reads a request in the wire form.
func decodePooledRequest(b []byte) (pooledRequest, error) {
	var r pooledRequest
	w := &wireReader{b: b}
	if v := w.u8(); w.err == nil && v != pooledWireVersion {
		return r, fmt.Errorf("%w: version %d, want %d", errPooledWire, v, pooledWireVersion)
	}
	flags := w.u8()
	r.Tty = flags&wireTTY != 0
	r.Spec.Network = flags&wireNetwork != 0
	r.Spec.FullWrite = flags&wireFullWrite != 0
	r.Spec.MountNamespace = flags&wireMountNamespace != 0
	r.Spec.DenySetID = flags&wireDenySetID != 0
	r.Files = int(w.u16())
	r.Spec.Limits = Limits{OpenFiles: w.u64(), FileSize: w.u64(), Processes: w.u64()}
	r.Spec.Arg0 = w.str()
	r.Spec.Dir = w.str()
	r.Spec.ReadOnly, r.Spec.ReadWrite, r.Spec.None, r.Spec.Protected = w.list(), w.list(), w.list(), w.list()
	n := w.u32()
	if uint64(n)*9 > uint64(len(w.b)) {
		w.take(len(w.b) + 1)
	} else if n > 0 {
		r.Spec.Mounts = make([]mountSpec, n)
		for i := range r.Spec.Mounts {
			r.Spec.Mounts[i] = mountSpec{Path: w.str(), FD: int(int32(w.u32())), ReadOnly: w.u8() != 0}
		}
	}
	r.Argv = w.list()
	r.Env = w.list()
	if w.err == nil && len(w.b) > 0 {
		w.err = fmt.Errorf("%w: %d bytes after the request", errPooledWire, len(w.b))
	}
	return r, w.err
}
