package transport

import (
	"encoding/binary"

	"github.com/outpost-exec/outpost/protocol"
)

// decodeOutputMsgpack decodes a process/output notification's params
// without copying the chunk: the chunk aliases the frame body, which the
// reader allocated for this frame alone. Anything but a map of exactly the
// four expected fields (in any order) takes the general decoder.
func decodeOutputMsgpack(b []byte, out *protocol.OutputNotification) bool {
	if len(b) == 0 || b[0] != 0x84 { // fixmap of 4
		return false
	}
	pos := 1
	var n protocol.OutputNotification
	seen := 0
	for i := 0; i < 4; i++ {
		key, next, ok := mpFixStr(b, pos)
		if !ok {
			return false
		}
		pos = next
		switch key {
		case "processId":
			s, next, ok := mpAnyStr(b, pos)
			if !ok {
				return false
			}
			n.ProcessID, pos = string(s), next
			seen |= 1
		case "seq":
			v, next, ok := mpUint(b, pos)
			if !ok {
				return false
			}
			n.Seq, pos = v, next
			seen |= 2
		case "stream":
			s, next, ok := mpAnyStr(b, pos)
			if !ok {
				return false
			}
			n.Stream, pos = protocol.Stream(s), next
			seen |= 4
		case "chunk":
			data, next, ok := mpBin(b, pos)
			if !ok {
				return false
			}
			n.Chunk, pos = data, next
			seen |= 8
		default:
			return false
		}
	}
	if seen != 15 || pos != len(b) {
		return false
	}
	*out = n
	return true
}

func mpFixStr(b []byte, pos int) (string, int, bool) {
	if pos >= len(b) || b[pos] < 0xa0 || b[pos] > 0xbf {
		return "", 0, false
	}
	l := int(b[pos] & 0x1f)
	if pos+1+l > len(b) {
		return "", 0, false
	}
	return string(b[pos+1 : pos+1+l]), pos + 1 + l, true
}

func mpAnyStr(b []byte, pos int) ([]byte, int, bool) {
	if pos >= len(b) {
		return nil, 0, false
	}
	var l, h int
	switch c := b[pos]; {
	case c >= 0xa0 && c <= 0xbf:
		l, h = int(c&0x1f), 1
	case c == 0xd9 && pos+2 <= len(b):
		l, h = int(b[pos+1]), 2
	case c == 0xda && pos+3 <= len(b):
		l, h = int(binary.BigEndian.Uint16(b[pos+1:])), 3
	default:
		return nil, 0, false
	}
	if pos+h+l > len(b) {
		return nil, 0, false
	}
	return b[pos+h : pos+h+l], pos + h + l, true
}

func mpUint(b []byte, pos int) (uint64, int, bool) {
	if pos >= len(b) {
		return 0, 0, false
	}
	switch c := b[pos]; {
	case c <= 0x7f:
		return uint64(c), pos + 1, true
	case c == 0xcc && pos+2 <= len(b):
		return uint64(b[pos+1]), pos + 2, true
	case c == 0xcd && pos+3 <= len(b):
		return uint64(binary.BigEndian.Uint16(b[pos+1:])), pos + 3, true
	case c == 0xce && pos+5 <= len(b):
		return uint64(binary.BigEndian.Uint32(b[pos+1:])), pos + 5, true
	case c == 0xcf && pos+9 <= len(b):
		return binary.BigEndian.Uint64(b[pos+1:]), pos + 9, true
	}
	return 0, 0, false
}

func mpBin(b []byte, pos int) ([]byte, int, bool) {
	if pos >= len(b) {
		return nil, 0, false
	}
	var l, h int
	switch c := b[pos]; {
	case c == 0xc4 && pos+2 <= len(b):
		l, h = int(b[pos+1]), 2
	case c == 0xc5 && pos+3 <= len(b):
		l, h = int(binary.BigEndian.Uint16(b[pos+1:])), 3
	case c == 0xc6 && pos+5 <= len(b):
		l, h = int(binary.BigEndian.Uint32(b[pos+1:])), 5
	case c == 0xc0: // nil: an empty chunk
		return []byte{}, pos + 1, true
	default:
		return nil, 0, false
	}
	if l < 0 || pos+h+l > len(b) {
		return nil, 0, false
	}
	return b[pos+h : pos+h+l : pos+h+l], pos + h + l, true
}

// decodeReadBlockMsgpack and decodeWriteBlockMsgpack decode fs/readBlock's
// result and fs/writeBlock's params with the chunk aliasing the frame body,
// as decodeOutputMsgpack does for output: a 1 MiB block is not copied once
// more. Anything but a map of exactly the expected fields takes the general
// decoder.
func decodeReadBlockMsgpack(b []byte, out *protocol.FsReadBlockResult) bool {
	if len(b) == 0 || b[0] != 0x82 { // fixmap of 2
		return false
	}
	var r protocol.FsReadBlockResult
	pos, seen := 1, 0
	for range 2 {
		key, next, ok := mpFixStr(b, pos)
		if !ok {
			return false
		}
		pos = next
		switch key {
		case "chunk":
			if r.Chunk, pos, ok = mpBin(b, pos); !ok {
				return false
			}
			seen |= 1
		case "eof":
			if pos >= len(b) || b[pos] != 0xc2 && b[pos] != 0xc3 {
				return false
			}
			r.EOF, pos = b[pos] == 0xc3, pos+1
			seen |= 2
		default:
			return false
		}
	}
	if seen != 3 || pos != len(b) {
		return false
	}
	*out = r
	return true
}

func decodeWriteBlockMsgpack(b []byte, out *protocol.FsWriteBlockParams) bool {
	if len(b) == 0 || b[0] != 0x83 { // fixmap of 3
		return false
	}
	var p protocol.FsWriteBlockParams
	pos, seen := 1, 0
	for range 3 {
		key, next, ok := mpFixStr(b, pos)
		if !ok {
			return false
		}
		pos = next
		switch key {
		case "handleId":
			s, next, ok := mpAnyStr(b, pos)
			if !ok {
				return false
			}
			p.HandleID, pos = string(s), next
			seen |= 1
		case "offset":
			if p.Offset, pos, ok = mpUint(b, pos); !ok {
				return false
			}
			seen |= 2
		case "chunk":
			if p.Chunk, pos, ok = mpBin(b, pos); !ok {
				return false
			}
			seen |= 4
		default:
			return false
		}
	}
	if seen != 7 || pos != len(b) {
		return false
	}
	*out = p
	return true
}
